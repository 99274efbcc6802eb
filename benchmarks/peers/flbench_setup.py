"""Prepare a copy of FL-bench (KarhouTam/FL-bench, outside this repository) to run fedbayes's FedAvg protocol.

    python flbench_setup.py --flbench /tmp/flbench --raw data/raw/fmnist --partition part.npz --init init.npz \
        --rounds 50 --local-epochs 10 --fidelity fid.json --config-name peers_fedavg
    (cd /tmp/flbench && python main.py --config-name peers_fedavg)        # run.sh times this
    python flbench_setup.py --flbench /tmp/flbench --collect --log LOG --out flbench.json --rounds 50

Runs in FL-bench's environment (build/peers/flbench). Nothing of FL-bench is copied into this repository;
this writes into the FL-bench copy only what its README asks a user to provide, through its own
extension points:
  data/fmnist/FashionMNIST/raw/   the four IDX files, uncompressed (torchvision's FashionMNIST reads them)
  data/fmnist/partition.pkl       + args.json: the `generate_data.py` format, filled with fedbayes's split
                                  (client k's training rows = fedbayes's client_k; the 10,000 test images
                                  dealt to the clients' test lists, whose union is the server's test set)
  src/server/peersfedavg.py       a method file (class PeersFedAvgServer(FedAvgServer), FL-bench's FedAvg
                                  client and server unchanged) that builds the 784-200-100-10 sigmoid MLP as
                                  a DecoupledModel from fedbayes's initial weights, feeds raw 0–255 pixels
                                  (undoes BaseDataset's /255, no Normalize) and records the centralised test accuracy after each round
  config/peers_fedavg.yaml        defaults.yaml with the protocol's values
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np

SERVER = r'''"""fedbayes's FedAvg protocol in FL-bench (written by fedbayes benchmarks/peers/flbench_setup.py)."""
import json
import os
import time
from collections import OrderedDict

import numpy as np
import torch
from torch import nn
from torchvision import transforms

from src.server.fedavg import FedAvgServer
from src.utils.models import DecoupledModel


class PeersMLP(DecoupledModel):
    def __init__(self):
        super().__init__()
        self.base = nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.Sigmoid(), nn.Linear(200, 100), nn.Sigmoid())
        self.classifier = nn.Linear(100, 10)


# fedbayes's names (nn.Sequential: Flatten 0, Linear 1, Sigmoid 2, Linear 3, Sigmoid 4, Linear 5) -> ours
_NAMES = {"1": "base.1", "3": "base.3", "5": "classifier"}


class PeersFedAvgServer(FedAvgServer):
    algorithm_name = "FedAvg"

    def __init__(self, args, init_trainer=True, init_model=True):
        self.peers_t0 = time.perf_counter()
        self.peers_history = []
        super().__init__(args, init_trainer=init_trainer, init_model=init_model)

    def init_model(self, model=None, preprocess_func=None, postprocess_func=None):
        m = PeersMLP()
        with np.load(os.environ["PEERS_INIT"]) as z:
            sd = OrderedDict((_NAMES[k.split(".")[0]] + "." + k.split(".")[1], torch.from_numpy(z[k].copy()))
                             for k in z.files)
        m.load_state_dict(sd)
        super().init_model(model=m, preprocess_func=preprocess_func, postprocess_func=postprocess_func)

    def get_dataset(self):
        # raw 0-255 pixels, as fedbayes's `input_scale: raw` for this experiment: FL-bench's BaseDataset
        # divides any data above 1 by 255 (_rescale_data); undone once here, exactly (round to the integers)
        dataset = super().get_dataset()
        dataset.data = torch.round(dataset.data * 255.0)
        return dataset

    def get_dataset_transforms(self):
        # and no Normalize (FL-bench's default for fmnist: mean 0.286, std 0.3205 on the [0, 1] pixels)
        none = transforms.Compose([])
        return dict(train_data_transform=none, train_target_transform=none,
                    test_data_transform=none, test_target_transform=none)

    def train(self):
        self.peers_history.append({"round": 0, "test/acc": None, "t": time.perf_counter() - self.peers_t0})
        super().train()

    def test_global_model(self):
        super().test_global_model()
        m = self.test_results[self.current_epoch + 1]["centralized"]["after"]["test"]
        self.peers_history.append({"round": self.current_epoch + 1, "test/acc": m.accuracy / 100.0,
                                   "test/nll": m.loss, "t": time.perf_counter() - self.peers_t0})
        with open(os.environ["PEERS_HISTORY"], "w") as fh:
            json.dump({"history": self.peers_history,
                       "adam_step": [int(s["state"][0]["step"]) if s and s.get("state") else 0
                                     for s in self.client_optimizer_states.values()]}, fh)
'''


def _write_data(fl: Path, raw: Path, partition: Path) -> None:
    d = fl / "data" / "fmnist"
    rawdir = d / "FashionMNIST" / "raw"
    rawdir.mkdir(parents=True, exist_ok=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        if not (rawdir / name).exists():
            with gzip.open(raw / f"{name}.gz", "rb") as src, open(rawdir / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
    with np.load(partition) as z:
        k = len([f for f in z.files if f.startswith("client_")])
        parts = [z[f"client_{j}"].astype(np.int64) for j in range(k)]
    # FL-bench's FashionMNIST is train (60,000) then test (10,000) concatenated
    tests = np.array_split(np.arange(60_000, 70_000), k)
    part = {"separation": {"train": list(range(k)), "val": list(range(k)), "test": list(range(k)), "total": k},
            "data_indices": [{"train": parts[j].tolist(), "val": [], "test": tests[j].tolist()} for j in range(k)]}
    with open(d / "partition.pkl", "wb") as fh:
        pickle.dump(part, fh)
    (d / "args.json").write_text(json.dumps({"client_num": k, "test_ratio": 0.0, "val_ratio": 0.0, "seed": 0,
                                             "split": "sample", "IID_ratio": 1.0,
                                             "monitor_window_name_suffix": f"fmnist-{k}clients-fedbayes-split"}, indent=1))


def _write_config(fl: Path, name: str, rounds: int, local_epochs: int) -> None:
    import yaml

    cfg = yaml.safe_load((fl / "config" / "defaults.yaml").read_text())
    cfg["method"] = "peersfedavg"
    cfg["dataset"]["name"] = "fmnist"
    cfg["model"].update(name="2nn", use_torchvision_pretrained_weights=False, external_model_weights_path=None)
    cfg["optimizer"].update(name="adam", lr=1e-3, weight_decay=0, betas=[0.9, 0.999], amsgrad=False)
    cfg["lr_scheduler"]["name"] = None
    cfg["mode"] = "serial"
    c = cfg["common"]
    c.update(seed=0, join_ratio=1.0, global_epoch=rounds, local_epoch=local_epochs, batch_size=32,
             reset_optimizer_on_global_epoch=False, straggler_ratio=0, buffers="global",
             client_side_evaluation=False, verbose_gap=10**6, monitor=None, use_cuda=False, save_log=True,
             save_model=False, save_learning_curve_plot=False, save_metrics=True, delete_useless_run=False)
    c["test"]["client"].update(interval=-1, finetune_epoch=0, train=False, val=False, test=False)
    c["test"]["server"].update(interval=1, train=False, val=False, test=True, model_in_train_mode=False)
    (fl / "config" / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


FIDELITY = {
    "summary": "same split, same init, client Adam kept across rounds (reset_optimizer_on_global_epoch: false); own minibatch order",
    "client optimiser": "Adam per client; FL-bench's server keeps each client's optimizer state_dict and hands it back "
                        "next round when `reset_optimizer_on_global_epoch: false` (its default is true: fresh Adam every round)",
    "data split": "the same rows: fedbayes's partition for seed 0 written as FL-bench's partition.pkl; pixels from the same "
                  "IDX files (torchvision's FashionMNIST reader), raw 0–255 floats: FL-bench's BaseDataset divides by 255 "
                  "(_rescale_data) and its transforms Normalize; the method file undoes the first (x·255, rounded: "
                  "the same integers) and drops the second",
    "initial model": "the same weights: fedbayes's initial state_dict (export_init.py) loaded into a DecoupledModel "
                     "(base = Linear-Sigmoid-Linear-Sigmoid, classifier = Linear), the same architecture",
    "local loop": "FL-bench's FedAvgClient.fit unchanged: DataLoader(batch 32, shuffle=True) per epoch, E epochs; it skips a "
                  "batch of size ≤ 1 (none here: the last batch has 24 rows); its own torch RNG",
    "aggregation": "FL-bench's FedAvgServer unchanged: weighted by client training-set size (equal here), all 10 clients "
                   "(join_ratio 1.0) in its sampled order",
    "evaluation": "FL-bench's centralised test (test.server.interval 1) of the global model on the union of the clients' "
                  "test lists = the 10,000 test images, batch 32 through its DataLoader, after every round; no client-side "
                  "evaluation",
    "runtime": "mode serial (FL-bench's parallel mode is Ray workers, which needs more than one core); its own logging "
               "and metrics files (save_log, save_metrics) left on as a user would",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flbench", required=True)
    ap.add_argument("--raw")
    ap.add_argument("--partition")
    ap.add_argument("--init")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--local-epochs", type=int, default=10)
    ap.add_argument("--fidelity")
    ap.add_argument("--config-name", default="peers_fedavg")
    ap.add_argument("--collect", action="store_true", help="turn the run's history into run.sh's <peer>.json")
    ap.add_argument("--log")
    ap.add_argument("--out")
    a = ap.parse_args()
    fl = Path(a.flbench).resolve()
    hist = fl / "peers_history.json"
    if a.collect:
        h = json.loads(hist.read_text())
        commit = (fl / ".flbench_commit").read_text().strip() if (fl / ".flbench_commit").exists() else "?"
        import torch
        last = h["adam_step"]
        out = {"peer": "flbench", "flbench": commit[:12], "torch": torch.__version__, "rounds": a.rounds,
               "client_optimizer": "persistent", "adam_step_last_round": max(last) if last else None,
               "final_acc": h["history"][-1]["test/acc"], "history": h["history"]}
        Path(a.out).write_text(json.dumps(out, indent=1))
        return
    _write_data(fl, Path(a.raw).resolve(), Path(a.partition).resolve())
    (fl / "src" / "server" / "peersfedavg.py").write_text(SERVER)
    _write_config(fl, a.config_name, a.rounds, a.local_epochs)
    init = fl / "peers_init.npz"
    shutil.copyfile(a.init, init)
    if hist.exists():
        hist.unlink()
    Path(a.fidelity).write_text(json.dumps(FIDELITY, indent=1))
    print(f"FL-bench at {fl}: data, partition, method peersfedavg and config {a.config_name} written", file=sys.stderr)


if __name__ == "__main__":
    main()
