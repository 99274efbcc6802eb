"""The clients' states kept in files once they outgrow memory (fedbayes.engine.clientstates): the same numbers,
a checkpoint that names files instead of holding tensors, a resume from it, and nothing left behind."""

import numpy as np
import pandas as pd
import pytest
import torch

from fedbayes.engine import run_federated
from fedbayes.engine.clientstates import CLIENTS_DIR, ClientStates, nbytes
from fedbayes.engine.loop import CHECKPOINT
from fedbayes.study.model import RunSpec

COLS = ["round", "test/acc", "test/nll", "test/ece", "train/loss"]


def quiet(_msg):
    pass


@pytest.fixture
def persistent(cfg_factory):
    """FedAvg whose clients keep their Adam moments between rounds: a state per client, the model's size ×2."""
    return cfg_factory(hparams={**cfg_factory()["hparams"], "client_optimizer": "persistent"})


def test_states_in_files_give_the_same_numbers_and_a_resumable_checkpoint(tmp_path, synthetic_run_data, persistent,
                                                                           monkeypatch):
    cpu = torch.device("cpu")
    run_federated(RunSpec.from_config(persistent), synthetic_run_data, tmp_path / "memory", cpu, log=quiet)
    monkeypatch.setattr("fedbayes.engine.clientstates.SPILL_BYTES", 0)   # every state to its file
    out = tmp_path / "files"
    run_federated(RunSpec.from_config(persistent), synthetic_run_data, out, cpu, log=quiet, stop_after=2)
    ckpt = torch.load(out / CHECKPOINT, weights_only=True)
    # the checkpoint names each client's file (written after round 2, or round 1 for a client not picked since)
    assert all(set(c) == {"__client_state_file__"} for c in ckpt["clients"]), ckpt["clients"]
    files = sorted(f.name for f in (out / CLIENTS_DIR).iterdir())
    assert files == sorted(c["__client_state_file__"] for c in ckpt["clients"])   # round 1's files: deleted
    assert nbytes(ckpt["clients"]) == 0 and nbytes(torch.load(out / CLIENTS_DIR / files[0], weights_only=True)) > 0
    logs = []
    run_federated(RunSpec.from_config(persistent), synthetic_run_data, out, cpu, log=logs.append)
    assert any("resuming from round 2" in m for m in logs)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "memory/history.csv")[COLS], pd.read_csv(out / "history.csv")[COLS])
    np.testing.assert_array_equal(np.load(tmp_path / "memory/predictions.npz")["test_logp"],
                                  np.load(out / "predictions.npz")["test_logp"])
    assert torch.equal(torch.load(tmp_path / "memory/posterior.pt")["w"], torch.load(out / "posterior.pt")["w"])
    assert not (out / CLIENTS_DIR).exists() and not (out / CHECKPOINT).exists()


def test_a_checkpoint_whose_state_files_are_gone_is_set_aside(tmp_path, synthetic_run_data, persistent, monkeypatch):
    monkeypatch.setattr("fedbayes.engine.clientstates.SPILL_BYTES", 0)
    cpu = torch.device("cpu")
    run_federated(RunSpec.from_config(persistent), synthetic_run_data, tmp_path, cpu, log=quiet, stop_after=2)
    next((tmp_path / CLIENTS_DIR).iterdir()).unlink()
    logs = []
    run_federated(RunSpec.from_config(persistent), synthetic_run_data, tmp_path, cpu, log=logs.append)
    assert any("states checkpoint.clients/" in m and "are missing" in m and "restarts from round 0" in m for m in logs), logs
    assert (tmp_path / (CHECKPOINT + ".set-aside")).exists() and (tmp_path / "history.csv").exists()


def test_small_states_stay_in_memory_and_shared_tensors_count_once(tmp_path):
    t = torch.zeros(1000)
    states = ClientStates([{"a": t}] * 50, tmp_path, spill_bytes=4000)   # one tensor, 50 references: 4,000 bytes
    states.spill(1)
    assert states.snapshot()[0] == {"a": t} and not (tmp_path / CLIENTS_DIR).exists()
    states[3] = {"a": torch.ones(1000)}                                 # 8,000 bytes now: to files
    states.spill(2)
    assert sorted(f.name for f in (tmp_path / CLIENTS_DIR).iterdir()) == sorted(f"{k}.r2.pt" for k in range(50))
    assert torch.equal(states[3]["a"], torch.ones(1000)) and torch.equal(states[4]["a"], t)
    states[3] = {"a": torch.full((2000,), 2.0)}                        # alone past the limit: its file
    states.spill(3)
    states.collect()
    assert (tmp_path / CLIENTS_DIR / "3.r3.pt").exists() and not (tmp_path / CLIENTS_DIR / "3.r2.pt").exists()
    states[3] = {"a": torch.zeros(10)}                                  # within it: kept in memory
    states.spill(4)
    states.collect()
    assert states.snapshot()[3]["a"].shape == (10,) and not (tmp_path / CLIENTS_DIR / "3.r3.pt").exists()
