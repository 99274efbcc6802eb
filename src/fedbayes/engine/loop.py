"""The round loop for one (experiment, method, seed) run.

Each round: sample clients, run their local updates from the broadcast state, aggregate, evaluate
the global predictive on the test and OOD sets, append a history row, and write an atomic
checkpoint. A killed run restarts from its last checkpoint and produces the same numbers as an
uninterrupted one (all randomness is keyed by (seed, round, client), see ``seeds.py``).

A run whose training loss or server state becomes non-finite (NaN/inf) stops at that round and is
recorded as diverged: its history up to that round, the predictions of the rounds before it, and
``run.json["diverged"] = {"round": r, "reason": ...}``. It is a finished run (a result, not a crash),
so the tables show it as diverged and everything else still builds.
"""

from __future__ import annotations

import csv
import inspect
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from fedbayes.study import method_defaults, numerics
from fedbayes.engine import seeds
from fedbayes.engine.clientstates import CLIENTS_DIR, ClientStates, missing_files
from fedbayes.engine.memory import keep_freed_memory
from fedbayes.fileio import atomic_target
from fedbayes.frontdoor import check_device
from fedbayes.machine import machine_class
from fedbayes.eval.metrics import metric_values, predictive_logprobs
from fedbayes.methods import build_method, method_spec
from fedbayes.methods.core.base import ClientData, Method
from fedbayes.methods.core.base import RunContext
from fedbayes.methods.core.chunks import networks_per_chunk, stacked_logits
from fedbayes.methods.failure import method_failure
from fedbayes.methods.hyperparameters import REQUIRED, EngineOptions
from fedbayes.models import FlatModel, build_model
from fedbayes.provenance import code_identity, plugin_identity, resume_key
from fedbayes.study.model import RunSpec

CHECKPOINT = "checkpoint.pt"
ROUNDS_DIR = "predictions.rounds"   # a training run's kept predictions, a file a round (_keep)


@dataclass
class RunData:
    """Tensors a run needs, already preprocessed and on the run's device."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_ood: torch.Tensor | None
    n_classes: int
    parts: list[np.ndarray]


def pick_device(name: str = "auto") -> torch.device:
    """The torch device of params.yaml's ``device``; ConfigError naming the key for a CUDA device this
    machine lacks (``frontdoor.check_device``)."""
    check_device({"device": name})
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def preprocess(x: np.ndarray, scale: str, stats: tuple[float, float] | None = None) -> torch.Tensor:
    """uint8 images → float32. ``raw``: pixel values 0–255 as floats (the authors' FMNIST code);
    ``unit``: /255; ``symmetric``: x/127.5 − 1 (Normalize(0.5, 0.5), the FOLA code's CIFAR-10);
    ``standardize``: (x/255 − mean)/std with ``stats`` from the training data."""
    t = torch.from_numpy(np.ascontiguousarray(x)).float()
    if scale == "raw":
        return t
    t = t / 255.0
    if scale == "unit":
        return t
    if scale == "symmetric":
        return 2.0 * t - 1.0
    if scale == "standardize":
        mean, std = stats
        return (t - mean) / std
    raise ValueError(f"unknown input_scale {scale!r}; choose raw, unit, symmetric or standardize")


def _nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


@torch.no_grad()
def predict(method: Method, server, x: torch.Tensor, batch: int = 4096, variant: str = "", seed: int = 0) -> np.ndarray:
    """log p̄(y|x) of the method's predictive ``variant``, (N, C), float32."""
    chunks = [predictive_logprobs(method.predict_logits(server, x[i:i + batch], variant=variant, seed=seed)
                                  .float().cpu().numpy())
              for i in range(0, len(x), batch)]
    return np.concatenate(chunks).astype(np.float32)


def variant_key(name: str, variant: str) -> str:
    """History column / prediction key of a variant: ``test/acc`` → ``mean/test/acc``."""
    return f"{variant}/{name}" if variant else name


def evaluated_variants(method: Method, rnd: int, cfg: dict) -> list[str]:
    """Variants evaluated after round ``rnd``: every ``eval_every`` rounds (experiment), sampled variants
    every ``mc_every`` rounds (engine option of the method's block, else experiment), and all of them at
    round 0, the last round and the saved (table) rounds. Two engine options leave sampled variants out where
    they are costly and unused: ``mc_round0: false`` at round 0, where the posterior is the
    initialisation (a 500-sample predictive of it costs as much CPU time as the whole training), and
    ``mc_window: false`` at the saved rounds before the last (the 3-round windows that ``mean_last3``
    tables average; tables with statistic ``final`` read the last round only)."""
    last, saved = cfg["rounds"], set(cfg["save_rounds"])
    opts = EngineOptions.from_hparams(cfg.get("hparams", {}))
    every = int(cfg.get("eval_every", 1))
    mc_every = int(cfg.get("mc_every", every) if opts.mc_every is REQUIRED else opts.mc_every)

    def due(kind: str) -> bool:
        if rnd == last:
            return True
        if kind != "samples":
            return rnd == 0 or rnd in saved or rnd % every == 0
        if rnd == 0:
            return bool(opts.mc_round0)
        return rnd % mc_every == 0 or (rnd in saved and bool(opts.mc_window))

    return [v for v, kind in method.variants.items() if due(kind)]


@torch.no_grad()
def local_accuracy(method: Method, w: torch.Tensor, data: RunData, batch: int = 4096) -> float:
    """Test accuracy of the plug-in network at ``w`` (a client's model)."""
    hits = sum(int((method.fm(w, data.x_test[i:i + batch]).argmax(-1) == data.y_test[i:i + batch]).sum())
               for i in range(0, len(data.y_test), batch))
    return hits / len(data.y_test)


@torch.no_grad()
def local_accuracies(method: Method, ws: list[torch.Tensor], data: RunData, batch: int = 4096,
                     chunk: int | None = None) -> list[float]:
    """``local_accuracy`` of each of the clients' models ``ws``: ``chunk`` models through one vmapped
    forward a test batch (None: ``chunks.networks_per_chunk``, one on a CPU, as many as fit on a GPU)."""
    fm = method.fm
    if chunk is None:
        chunk = networks_per_chunk(fm, data.x_test[:batch], len(ws)) if fm.row_wise else 1
    if chunk <= 1:
        return [local_accuracy(method, w, data, batch) for w in ws]
    hits = torch.zeros(len(ws), dtype=torch.long, device=data.y_test.device)
    for c in range(0, len(ws), chunk):
        W = torch.stack(ws[c:c + chunk])
        for i in range(0, len(data.y_test), batch):
            pred = stacked_logits(fm, W, data.x_test[i:i + batch]).argmax(-1)
            hits[c:c + chunk] += (pred == data.y_test[i:i + batch]).sum(-1)
    return (hits.double() / len(data.y_test)).tolist()


def _generators(method: Method, streams: list[tuple], device: torch.device) -> dict:
    """``generators=`` for ``client_updates``: one torch generator a client, seeded as the sequential
    loop seeds the global one before that client's ``client_update`` — for a method whose
    ``client_updates`` takes them (an outside method written before they existed does not)."""
    if "generators" not in inspect.signature(method.client_updates).parameters:
        return {}
    return {"generators": [torch.Generator(device=device).manual_seed(seeds.torch_seed(*st)) for st in streams]}


def _divergence(losses: list[float], server: dict) -> str | None:
    """Why a round's outcome is unusable (non-finite client loss or server state), or None."""
    if not np.all(np.isfinite(losses)):
        return "non-finite training loss"
    bad = [k for k, v in server.items() if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(v).all()]
    return f"non-finite server state ({', '.join(sorted(bad))})" if bad else None


def _resumable(path: Path, key: str, device, log, method: str | None = None) -> dict | None:
    """The checkpoint at ``path`` if this configuration and this exact code (sources and library
    versions, a plug-in ``method``'s package, ``provenance.resume_key``) wrote it; otherwise None, and a checkpoint that exists is set
    aside as ``checkpoint.pt.set-aside`` with one line saying why (the run restarts: resuming onto other
    code would give a run that matches neither version)."""
    if not path.exists():
        return None
    why = None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated or foreign file: never resumed, never a traceback
        state, why = None, f"unreadable ({type(e).__name__})"
    if state is not None:
        if not isinstance(state, dict) or "round" not in state:
            why = "not a fedbayes checkpoint"
        elif state.get("config_hash") != key:
            why = f"another configuration ({state.get('config_hash')} != {key})"
        elif state.get("code") != resume_key(method):
            why = f"written by other code ({state.get('code')}; this is {resume_key(method)})"
        elif lost := missing_files(state.get("clients", []), path.parent):
            why = f"its clients' states {CLIENTS_DIR}/{lost[0]} (and {len(lost) - 1} more) are missing"
    if why is None:
        return state
    aside = path.with_name(path.name + ".set-aside")
    os.replace(path, aside)
    log(f"checkpoint {path} {why}: set aside as {aside.name}; the run restarts from round 0")
    return None


def _atomic_save(obj, path: Path) -> None:
    with atomic_target(path) as tmp:  # a name unique to this process: two writers never share it
        torch.save(obj, tmp)


def hold_out(parts: list[np.ndarray], share: float, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Take ``floor(share · N_k)`` points, drawn at random, out of every client k: (the clients' remaining
    indices, the held-out indices). Client by client, so no client is emptied and the label skew of the
    partition is kept. For a method whose spec needs ``server_data`` (its share: ``Method.server_share``)."""
    if share <= 0:
        return parts, np.zeros(0, dtype=np.int64)
    if not share < 1:
        raise ValueError(f"the server's share {share} must be a share of the clients' points below 1")
    kept, held = [], []
    for p in parts:
        out = rng.permutation(len(p))[:int(share * len(p))]
        mask = np.ones(len(p), dtype=bool)
        mask[out] = False
        kept.append(p[mask])
        held.append(p[~mask])
    on_clients = np.concatenate(kept)
    held = np.setdiff1d(np.concatenate(held), on_clients)   # a point copied to two clients stays where it is kept
    return kept, held


def run_federated(run: RunSpec, data: RunData, out_dir: str | Path, device: torch.device,
                  log=print, stop_after: int | None = None, batch_clients: bool | None = None) -> list[dict]:
    """Train the run ``run`` (a study's ``Study.run``, or ``RunSpec.from_config`` of a configuration not
    read from params.yaml), writing ``history.csv``, ``predictions.npz``, ``posterior.pt``, ``run.json``
    (whose ``config`` and ``config_hash`` are the RunSpec's ``record`` and ``hash``).

    ``stop_after`` ends the process-equivalent early after that many rounds (used by tests to
    simulate a kill); the checkpoint is left behind exactly as a killed run would leave it.
    ``batch_clients`` (params.yaml ``batch_clients``; None = on a GPU only): a round's clients train
    together where the method can (``Method.client_updates``), the same numbers up to float round-off.
    An exception raised inside the method's own code (``methods.failure``) becomes a ``MethodFailed``
    naming the method, its file and line, and the run's partial files (checkpoint, kept predictions) are
    removed: the same code would fail the same way on resuming, and other code restarts from round 0
    anyway. Any other exception (disk full, out of memory, a kill) leaves the checkpoint to resume from.
    """
    out = Path(out_dir)
    try:
        return _run_federated(run, data, out, device, log, stop_after, batch_clients)
    except Exception as e:
        failed = method_failure(run.method, e)
        if failed is None:
            raise
        discard_partial(out)
        raise failed from e


def discard_partial(out: Path) -> None:
    """Remove what an unfinished training leaves in its run directory (the checkpoint, the kept rounds'
    predictions), an earlier training's predictions and posterior where no run file records that training
    any longer (a retrained run: the workflow removed its run.json and history.csv), and the directory
    itself if nothing else is in it."""
    (out / CHECKPOINT).unlink(missing_ok=True)
    shutil.rmtree(out / ROUNDS_DIR, ignore_errors=True)
    shutil.rmtree(out / CLIENTS_DIR, ignore_errors=True)
    if not any((out / f).exists() for f in ("run.json", "history.csv")):
        for f in ("predictions.npz", "posterior.pt"):
            (out / f).unlink(missing_ok=True)
    try:
        out.rmdir()   # only when empty: a finished run's files or a set-aside checkpoint stay
    except OSError:
        pass


def _run_federated(run: RunSpec, data: RunData, out: Path, device: torch.device, log, stop_after: int | None,
                   batch_clients: bool | None) -> list[dict]:
    keep_freed_memory()
    out.mkdir(parents=True, exist_ok=True)
    cfg = run.record   # what run.json records; the helpers below read the run's settings from it
    seed, rounds, hp = run.seed, cfg["rounds"], cfg["hparams"]
    key = run.hash
    opts, spec = EngineOptions.from_hparams(hp), method_spec(run.method)
    # what the method's spec needs of the run: a held-out share of the training points on the server
    share = spec.load().server_share(spec.params.from_hparams(hp)) if "server_data" in spec.needs else 0.0
    parts, server_idx = hold_out(data.parts, share, seeds.rng(seed, seeds.SERVER))
    sizes = np.array([len(p) for p in parts])

    torch.manual_seed(seeds.torch_seed(seed, seeds.INIT))
    module = build_model(cfg["model"]["name"], tuple(data.x_train.shape[1:]), data.n_classes,
                         **{k: v for k, v in cfg["model"].items() if k != "name"})
    fm = FlatModel(module.to(device))
    context = RunContext(rounds=rounds, clients_per_round=max(1, round(cfg.get("participation", 1.0) * len(sizes))),
                         seed=seed, server_x=data.x_train[torch.from_numpy(server_idx).to(device)] if len(server_idx) else None)
    method = build_method(spec, fm, hp, sizes, context)
    if opts.client_rows == "by_label":
        # each client's rows grouped by class (stable): with `client_stream: replay` every client then sees
        # the same label mix at every step, as in the BayesADMM authors' code, whose iid split concatenates
        # each client's classes and whose clients all draw one permutation (papers/bayesadmm/NOTES.md)
        y = data.y_train.cpu().numpy()
        parts = [p[np.argsort(y[p], kind="stable")] for p in parts]
    clients = [ClientData(data.x_train[torch.from_numpy(p).to(device)], data.y_train[torch.from_numpy(p).to(device)])
               for p in parts]

    ckpt_path = out / CHECKPOINT
    state = _resumable(ckpt_path, key, device, log, run.method)
    if state is None:
        started = _now()
        server, client_states = method.init_state(fm.flat_params())
        client_states = ClientStates(client_states, out, device)
        client_states.discard()   # an earlier training's (its checkpoint set aside)
        start, history, wall = 1, [], 0.0
        shutil.rmtree(out / ROUNDS_DIR, ignore_errors=True)   # an earlier training's kept predictions
        row, logp = _evaluate(method, server, data, 0, {}, log, cfg)
        history.append(row)
        _keep(out, 0, logp, cfg)
    else:
        # the first process's start (None: a checkpoint written before checkpoints kept it)
        started = state.get("started")
        server, client_states = state["server"], ClientStates(state["clients"], out, device)
        start, history, wall = state["round"] + 1, state["history"], state["wall"]
        log(f"resuming from round {state['round']} ({ckpt_path})")

    diverged = None
    n_part = method.clients_per_round
    # `client_stream: replay` (engine option): every client in every round draws the same random
    # stream (minibatch order, MC noise), as the BayesADMM authors' code does by reseeding in each client's
    # train() (BayesADMM spec §3.1.2 item 9); default `independent`: one stream per (seed, round, client).
    replay = opts.client_stream == "replay"
    # the clients' own models on the test set (experiments.<e>.local_eval), of a method that has them
    local_eval = bool(cfg.get("local_eval", False)) and "local_models" in method.spec.needs
    if batch_clients is None:
        batch_clients = device.type == "cuda"
    batched_rounds = 0
    for rnd in range(start, rounds + 1):
        t0 = time.perf_counter()
        picked = np.arange(len(sizes)) if n_part == len(sizes) else \
            np.sort(seeds.rng(seed, seeds.SAMPLING, rnd).choice(len(sizes), n_part, replace=False))
        down = method.broadcast(server, rnd)
        messages, losses, up_bytes, local = {}, [], 0, {}
        ks = [int(k) for k in picked]
        streams = [(seed, seeds.TRAIN) if replay else (seed, seeds.TRAIN, rnd, k) for k in ks]
        together = method.client_updates(ks, down, [client_states[k] for k in ks], [clients[k] for k in ks],
                                          [seeds.rng(*st) for st in streams], rnd,
                                          **_generators(method, streams, device)) if batch_clients else None
        batched_rounds += together is not None
        for i, k in enumerate(ks):
            if together is not None:
                msg, client_states[k], loss = together[i]
            else:
                torch.manual_seed(seeds.torch_seed(*streams[i]))
                msg, client_states[k], loss = method.client_update(
                    k, down, client_states[k], clients[k], seeds.rng(*streams[i]), rnd)
            client_states.spill(rnd)   # its new state to its file once the states outgrow memory
            messages[k] = msg
            if local_eval and (w_local := method.local_weights(msg, down)) is not None:
                local[k] = w_local
            losses.append(loss)
            up_bytes += _nbytes(msg)
        server = method.server_update(server, messages, rnd)
        dt = time.perf_counter() - t0
        wall += dt
        comm = {"train/loss": float(np.average(losses, weights=sizes[picked])), "clients": len(picked),
                "time_s": dt, "wall_s": wall, "bytes_up": up_bytes, "bytes_down": _nbytes(down) * len(picked)}
        if local:  # local accuracy: the clients' models before aggregation, on the global test set
            comm["local/acc"] = float(np.average(local_accuracies(method, [local[k] for k in sorted(local)], data),
                                                 weights=sizes[sorted(local)]))
        reason = _divergence(losses, server)
        # a non-finite loss or server state, or finite weights whose predictions are not (logits past float
        # range: _evaluate's reason): keep the history so far, record the round, stop
        row, logp = (None, reason) if reason is not None else _evaluate(method, server, data, rnd, comm, log, cfg)
        if row is None:
            history.append({"round": rnd, **comm})
            diverged = {"round": rnd, "reason": logp}
            log(f"[{run.experiment} {run.method} seed {seed}] round {rnd:3d}/{rounds}  DIVERGED: {logp}; "
                f"run stopped and recorded as diverged")
            break
        history.append(row)
        _keep(out, rnd, logp, cfg)
        _atomic_save({"config_hash": key, "code": resume_key(run.method), "round": rnd, "server": server,
                      "clients": client_states.snapshot(), "history": history, "wall": wall, "started": started}, ckpt_path)
        client_states.collect()    # the files this checkpoint no longer names
        if stop_after is not None and rnd >= stop_after:
            return history

    _write_outputs(out, cfg, key, history, server, data, device, sizes, diverged, started,
                   batched_rounds=batched_rounds)
    ckpt_path.unlink(missing_ok=True)
    client_states.discard()
    return history


def _evaluate(method, server, data: RunData, rnd: int, extra: dict, log, cfg) -> tuple[dict | None, dict | str]:
    """(history row, predictions to save) of round ``rnd``; (None, why) when a prediction is not finite
    (a blown-up model whose weights are still finite): the round diverged."""
    t0 = time.perf_counter()
    row, logps, shown = {"round": rnd}, {}, None
    seed = seeds.torch_seed(cfg["seed"], seeds.EVAL, rnd)
    for v in evaluated_variants(method, rnd, cfg):
        logp = predict(method, server, data.x_test, variant=v, seed=seed)
        logp_ood = predict(method, server, data.x_ood, variant=v, seed=seed) if data.x_ood is not None else None
        for name, lp in (("test", logp), ("ood", logp_ood)):
            if lp is not None and np.isnan(lp).any():
                return None, f"non-finite predictions ({variant_key(name, v)} log-probabilities are NaN)"
        m = metric_values(logp, data.y_test.cpu().numpy(), logp_ood)   # by registry name (test/…, ood/…)
        row.update({variant_key(name, v): val for name, val in m.items()})
        logps[variant_key("test", v)] = torch.from_numpy(logp)
        if logp_ood is not None:
            logps[variant_key("ood", v)] = torch.from_numpy(logp_ood)
        shown = shown or (v, m)
    row.update(extra)
    row["eval_s"] = time.perf_counter() - t0
    tag = f"[{cfg['experiment']} {cfg['method']} seed {cfg['seed']}]"
    msg = f"{tag} round {rnd:3d}/{cfg['rounds']}"
    if shown is not None:
        v, m = shown
        msg += f"  {v + ' ' if v else ''}acc {m['test/acc']:.4f}  nll {m['test/nll']:.4f}  ece {m['test/ece']:.4f}"
    if "time_s" in extra:
        msg += f"  loss {extra['train/loss']:.4f}  {extra['time_s']:.2f}s"
    log(msg)
    return row, logps


def _keep(out: Path, rnd: int, logps: dict, cfg: dict) -> None:
    """Keep round ``rnd``'s predictions (``_evaluate``'s log-probabilities) for evaluation: every
    evaluated round (``keep_predictions: every_round``, the default: a metric definition change then
    re-evaluates every curve and every table cell, eval.evaluate), or the table rounds only
    (``table_rounds``: the experiments whose every round would take gigabytes). One file a round under
    ``<run>/predictions.rounds/`` while the run trains (a resumed run keeps what its first process wrote;
    not part of the checkpoint, which is rewritten every round); ``_write_outputs`` gathers them."""
    if not isinstance(logps, dict) or not logps or (cfg.get("keep_predictions", "every_round") != "every_round" and rnd not in cfg["save_rounds"]):
        return
    (out / ROUNDS_DIR).mkdir(exist_ok=True)
    arrays = {}
    for name, lp in logps.items():   # test, ood, mean/test, ... → test_logp, ood_logp, test_logp@mean, ...
        variant, _, split = name.rpartition("/")
        arrays[f"{split}_logp" + (f"@{variant}" if variant else "")] = lp.numpy()
    with atomic_target(out / ROUNDS_DIR / f"{rnd:05d}.npz", keep_suffix=True) as tmp:
        np.savez(tmp, **arrays)


def _now() -> str:
    """Wall-clock time, ISO 8601 in UTC: when training started / finished (run.json; MLflow's run times)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _write_outputs(out: Path, cfg, key, history, server, data: RunData, device, sizes, diverged=None,
                   started: str | None = None, batched_rounds: int = 0) -> None:
    cols = list(dict.fromkeys(c for row in history for c in row))
    with atomic_target(out / "history.csv") as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(history)

    # the kept rounds' predictions (_keep) in one archive: test_logp, ood_logp, test_logp@mean, ..., a
    # row per kept round; a variant not evaluated at a kept round (``mc_every``, ``mc_window: false``) is
    # NaN there, which evaluate_run skips
    last = history[-1]["round"]
    # a round's file is <round>.npz; a temporary one (<round>.<pid>.tmp.npz) is what a process killed while it
    # wrote that round left behind, and that round was written again after the resume
    files = {int(f.stem): f for f in (out / ROUNDS_DIR).glob("*.npz") if f.stem.isdigit()} if (out / ROUNDS_DIR).is_dir() else {}
    rounds = sorted(r for r in files if r <= last)
    arrays = {"rounds": np.array(rounds, dtype=np.int64), "y_test": data.y_test.cpu().numpy()}
    kept = {}
    for r in rounds:
        with np.load(files[r], allow_pickle=False) as z:
            kept[r] = {k: z[k] for k in z.files}
    for name in kept[rounds[-1]] if rounds else ():
        like = kept[rounds[-1]][name]
        arrays[name] = np.stack([kept[r][name] if name in kept[r] else np.full_like(like, np.nan) for r in rounds])
    with atomic_target(out / "predictions.npz", keep_suffix=True) as tmp:  # np.savez appends .npz otherwise
        np.savez_compressed(tmp, **arrays)
    shutil.rmtree(out / ROUNDS_DIR, ignore_errors=True)

    _atomic_save({k: v.cpu() for k, v in server.items()}, out / "posterior.pt")
    info = {"config": cfg, "config_hash": key, "numerics": numerics(cfg["method"]),
            # what its method read from its spec where the configuration gives nothing (the rerun rule compares it)
            "defaults": method_defaults(cfg["method"], cfg["hparams"]), "code": code_identity(),
            # an installed package's method: its distribution, version and source hash (built-in: nothing)
            **({"plugin": plugin_identity(cfg["method"])} if plugin_identity(cfg["method"]) else {}),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "device": str(device),
            # what decides its bits besides code and configuration (fedbayes.machine: bits within a class,
            # round-off across classes)
            "machine": {**machine_class(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
                        "aten": torch.backends.cpu.get_cpu_capability()},
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
            "torch": torch.__version__, "python": sys.version.split()[0], "threads": torch.get_num_threads(),
            "wall_s": history[-1].get("wall_s"), "client_sizes": [int(n) for n in sizes],
            # the most GPU memory the run's tensors held at once (CUDA's allocator), for the README's GPU column
            **({"gpu_peak_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)} if device.type == "cuda" else {}),
            # rounds whose clients trained together (batch_clients; this process's rounds, a resumed run's since it resumed)
            **({"batched_rounds": batched_rounds} if batched_rounds else {}),
            # when training started (a resumed run: its first process) and finished; not numerics, and not
            # part of the rerun key (config + numerics), so adding them reran nothing
            "started": started, "finished": _now()}
    if diverged is not None:
        info["diverged"] = diverged
    with atomic_target(out / "run.json") as tmp:
        tmp.write_text(json.dumps(info, indent=2))
