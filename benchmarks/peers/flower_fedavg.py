"""FedAvg on fmnist10-iid-k10 in Flower's simulation runtime, the protocol of `fedbayes train`.

    python benchmarks/peers/flower_fedavg.py --raw data/raw/fmnist --partition part.npz --init init.npz \
        --rounds 50 --local-epochs 10 --out flower.json

Runs in its own environment (build/peers/flower: flwr[simulation], torch, numpy; no fedbayes import).
It reads Fashion-MNIST's IDX files itself, the clients' rows from the partition file `fedbayes partition`
writes (client_<k>: row indices into the 60,000 training images), and the initial weights from
export_init.py, so the split and the initial model are fedbayes's own for that seed. The protocol:
K clients (one Flower SuperNode each, all sampled every round), MLP 784-200-100-10 with sigmoid
activations on raw 0–255 pixels, Adam (lr 1e-3) minibatch 32 reshuffled every epoch, E local epochs,
FedAvg weighted by client size (Flower's own `FedAvg` strategy), and the global model evaluated on the
10,000 test images after every round (Flower's centralised `evaluate_fn`). `--client-optimizer persistent`
(fedbayes's setting for this experiment) keeps each client's Adam moments and step count across rounds in
the client's Flower `Context.state`; `fresh` builds a new Adam every round, as Flower's examples do.

The client functions are imported from this module by name in Flower's Ray workers (PYTHONPATH is set
below), so each worker process reads the data once and keeps it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

HERE = Path(__file__).resolve().parent


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (gzipped or not) as a numpy array: magic (0, 0, dtype code, ndim), big-endian dims, data."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mlp(hidden=(200, 100), n_in: int = 784, n_out: int = 10) -> nn.Sequential:
    """Flatten, then Linear+Sigmoid per hidden layer, then a linear head: fedbayes's `models.mlp` (same
    parameter names, '1.weight' …), so its exported initial state_dict loads as is."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = n_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.Sigmoid()]
        width = h
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


# ------------------------------------------------------------------------------------------ client side

_CACHE: dict = {}


def _client_data(raw: str, partition: str, pid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client ``pid``'s rows as float32 raw pixels (0–255) and int64 labels, read once per worker."""
    key = (raw, partition)
    if key not in _CACHE:
        x = read_idx(Path(raw) / "train-images-idx3-ubyte.gz")
        y = read_idx(Path(raw) / "train-labels-idx1-ubyte.gz")
        with np.load(partition) as z:
            k = len([f for f in z.files if f.startswith("client_")])
            parts = [z[f"client_{j}"].astype(np.int64) for j in range(k)]
        _CACHE[key] = [(torch.from_numpy(x[p].astype(np.float32)), torch.from_numpy(y[p].astype(np.int64)))
                       for p in parts]
    return _CACHE[key][pid]


def _adam_to_record(opt: torch.optim.Adam) -> ArrayRecord:
    st = opt.state_dict()["state"]
    arrays = {}
    for i, s in st.items():
        arrays[f"{i}.step"] = s["step"].detach().reshape(1).clone()
        arrays[f"{i}.exp_avg"] = s["exp_avg"].detach().clone()
        arrays[f"{i}.exp_avg_sq"] = s["exp_avg_sq"].detach().clone()
    return ArrayRecord(arrays)


def _adam_from_record(opt: torch.optim.Adam, rec: ArrayRecord) -> None:
    t = rec.to_torch_state_dict()
    n = len(opt.param_groups[0]["params"])
    sd = opt.state_dict()
    sd["state"] = {i: {"step": t[f"{i}.step"].reshape(()).clone(), "exp_avg": t[f"{i}.exp_avg"].clone(),
                       "exp_avg_sq": t[f"{i}.exp_avg_sq"].clone()} for i in range(n)}
    opt.load_state_dict(sd)


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    cfg = msg.content["config"]
    pid = int(context.node_config["partition-id"])
    x, y = _client_data(str(cfg["raw"]), str(cfg["partition"]), pid)
    model = mlp()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=float(cfg["lr"]))
    persistent = str(cfg["client-optimizer"]) == "persistent"
    if persistent and "adam" in context.state:
        _adam_from_record(opt, context.state["adam"])
    rnd = int(cfg.get("server-round", 0))
    gen = torch.Generator().manual_seed(int(cfg["seed"]) * 1_000_003 + pid * 10_007 + rnd)
    bs, n = int(cfg["batch-size"]), len(y)
    loss_fn = nn.CrossEntropyLoss()
    total, steps = 0.0, 0
    model.train()
    for _ in range(int(cfg["local-epochs"])):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, bs):
            b = perm[i:i + bs]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[b]), y[b])
            loss.backward()
            opt.step()
            total += float(loss)
            steps += 1
    if persistent:
        context.state["adam"] = _adam_to_record(opt)
    adam_steps = int(opt.state_dict()["state"][0]["step"])
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": n, "train_loss": total / max(steps, 1),
                                                   "adam_step": adam_steps})})
    return Message(content=content, reply_to=msg)


# ------------------------------------------------------------------------------------------ server side

server_app = ServerApp()
ARGS: dict = {}


def _test_set(raw: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = read_idx(Path(raw) / "t10k-images-idx3-ubyte.gz").astype(np.float32)
    y = read_idx(Path(raw) / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    torch.set_num_threads(1)
    a = ARGS
    xt, yt = _test_set(a["raw"])
    model = mlp()
    history: list[dict] = []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        t0 = time.perf_counter()
        model.load_state_dict(arrays.to_torch_state_dict())
        model.eval()
        with torch.no_grad():
            logits = model(xt)
            nll = float(nn.functional.cross_entropy(logits, yt))
            acc = float((logits.argmax(1) == yt).float().mean())
        now = time.perf_counter()
        history.append({"round": server_round, "test/acc": acc, "test/nll": nll, "eval_s": now - t0,
                        "t": now - a["t_start"]})
        print(f"flower round {server_round:3d}/{a['rounds']}  acc {acc:.4f}  nll {nll:.4f}", flush=True)
        return MetricRecord({"accuracy": acc, "nll": nll})

    with np.load(a["init"]) as z:
        init = {k: torch.from_numpy(z[k].copy()) for k in z.files}
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=a["clients"],
                      min_available_nodes=a["clients"])
    cfg = ConfigRecord({"raw": a["raw"], "partition": a["partition"], "lr": a["lr"], "batch-size": a["batch_size"],
                        "local-epochs": a["local_epochs"], "client-optimizer": a["client_optimizer"],
                        "seed": a["seed"]})
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=a["rounds"],
                            train_config=cfg, evaluate_fn=evaluate)
    train_metrics = {int(r): dict(m) for r, m in result.train_metrics_clientapp.items()}
    # rounds' own time: from the evaluation before round 1 to the one after round R (start-up excluded)
    loop_s = history[-1]["t"] - history[0]["t"] if len(history) > 1 else float("nan")
    out = {"peer": "flower", "flwr": _version("flwr"), "ray": _version("ray"), "torch": torch.__version__,
           "rounds": a["rounds"], "clients": a["clients"], "local_epochs": a["local_epochs"],
           "client_optimizer": a["client_optimizer"], "final_acc": history[-1]["test/acc"],
           "loop_s": loop_s, "s_per_round": loop_s / a["rounds"],
           "adam_step_last_round": train_metrics.get(a["rounds"], {}).get("adam_step"),
           "history": history}
    Path(a["out"]).write_text(json.dumps(out, indent=1))


def _version(pkg: str) -> str:
    from importlib.metadata import version
    return version(pkg)


def run(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True, help="folder with Fashion-MNIST's four IDX .gz files")
    ap.add_argument("--partition", required=True, help="npz written by `fedbayes partition`")
    ap.add_argument("--init", required=True, help="npz written by export_init.py")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--local-epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--client-optimizer", choices=("persistent", "fresh"), default="persistent")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    with np.load(a.partition) as z:
        clients = len([f for f in z.files if f.startswith("client_")])
    ARGS.update(vars(a), clients=clients, raw=str(Path(a.raw).resolve()), partition=str(Path(a.partition).resolve()),
                init=str(Path(a.init).resolve()), out=str(Path(a.out).resolve()), t_start=time.perf_counter())
    from flwr.simulation import run_simulation

    # one Ray worker with one CPU runs the clients one after another (the machine's core for this peer)
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 1, "num_gpus": 0, "include_dashboard": False}})
    if not Path(a.out).exists():
        sys.exit("flower_fedavg: the server app wrote no result (see the log above)")


if __name__ == "__main__":
    # Ray's workers import the client functions from this module by name (not pickled by value from
    # __main__), so the module's data cache lives as long as the worker
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    import flower_fedavg

    flower_fedavg.run()
