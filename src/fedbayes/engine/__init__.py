from fedbayes.engine.loop import RunData, pick_device, preprocess, run_federated

__all__ = ["RunData", "pick_device", "preprocess", "run_federated"]
