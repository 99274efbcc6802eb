from fedbayes.engine.data import load_run_data
from fedbayes.engine.loop import RunData, pick_device, preprocess, run_federated

__all__ = ["RunData", "load_run_data", "pick_device", "preprocess", "run_federated"]
