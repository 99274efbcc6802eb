"""The initial weights `fedbayes train` starts a run from, written for the peers.

    python benchmarks/peers/export_init.py --experiment fmnist10-iid-k10 --seed 0 --out init.npz

Runs in fedbayes's environment: seeds torch as `engine.loop.run_federated` does (the run seed's INIT
stream) and builds the experiment's model, then saves its state_dict as arrays keyed by parameter name
(e.g. "1.weight"), so a peer can start from the very same weights without importing fedbayes.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from fedbayes.study import load_params
from fedbayes.engine import seeds
from fedbayes.models import build_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    exp = load_params(a.params)["experiments"][a.experiment]
    assert exp["dataset"] in ("fmnist", "mnist"), "only the 28×28, 10-class image sets are wired here"
    torch.manual_seed(seeds.torch_seed(a.seed, seeds.INIT))
    model = build_model(exp["model"]["name"], (28, 28), 10, **{k: v for k, v in exp["model"].items() if k != "name"})
    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    np.savez(a.out, **sd)
    print(f"{a.out}: {len(sd)} arrays, {sum(math.prod(v.shape) for v in sd.values())} parameters")


if __name__ == "__main__":
    main()
