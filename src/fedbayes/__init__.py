"""fedbayes: a reproducibility workflow for Bayesian federated learning."""

__version__ = "0.1.0"
