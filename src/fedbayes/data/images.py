"""Image datasets beyond Fashion-MNIST (MNIST, CIFAR-10): registered on import."""
