"""Hashing, persistence and plotting of client partitions."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from fedbayes.fileio import atomic_target

from .schemes import class_counts

__all__ = ["PartitionIntegrityError", "partition_hash", "save_partition", "load_partition", "plot_partition"]


class PartitionIntegrityError(ValueError):
    """A partition file whose content does not match its stored hash, or cannot be read at all."""


def partition_hash(parts: list[np.ndarray]) -> str:
    """SHA-256 hex digest of a partition.

    Hashes ``K`` followed, for each client in order, by its length and its indices as
    little-endian int64 bytes (the length keeps client boundaries unambiguous). The
    digest depends only on the index values, so it is stable across runs and platforms.
    """
    h = hashlib.sha256()
    h.update(b"fedbayes-partition-v1")
    h.update(np.int64(len(parts)).astype("<i8").tobytes())
    for p in parts:
        arr = np.ascontiguousarray(np.asarray(p).astype("<i8", copy=False))
        if arr.ndim != 1:
            raise ValueError(f"each client's indices must be 1-D, got shape {arr.shape}")
        h.update(np.int64(arr.size).astype("<i8").tobytes())
        h.update(arr.tobytes())
    return h.hexdigest()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"meta value of type {type(obj).__name__} is not JSON serialisable")


def save_partition(
    path: str | os.PathLike, parts: list[np.ndarray], labels: Any, n_classes: int, meta: dict
) -> str:
    """Atomically write a partition to an ``.npz`` file and return its hash.

    Arrays: ``client_<k>`` (int64 indices), ``class_counts`` (K, C), ``sizes`` (K,) and
    ``meta_json`` (0-d string array: ``meta`` plus ``hash`` and ``n_clients``).
    """
    path = Path(path)
    parts = [np.asarray(p).astype(np.int64, copy=False) for p in parts]
    counts = class_counts(labels, parts, n_classes)  # also validates index range
    digest = partition_hash(parts)
    full_meta = dict(meta or {})
    full_meta.update({"hash": digest, "n_clients": len(parts)})
    meta_json = json.dumps(full_meta, sort_keys=True, default=_json_default)

    arrays: dict[str, np.ndarray] = {f"client_{k}": p for k, p in enumerate(parts)}
    arrays["class_counts"] = counts
    arrays["sizes"] = np.array([p.size for p in parts], dtype=np.int64)
    arrays["meta_json"] = np.array(meta_json)

    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file unique to this process, renamed when complete; on a full disk it is removed and
    # the error names the partition file (np.savez's own OSError names none)
    with atomic_target(path) as tmp, open(tmp, "wb") as fh:  # file object: np.savez must not append ".npz"
        np.savez_compressed(fh, **arrays)
        fh.flush()
        os.fsync(fh.fileno())
    return digest


def load_partition(path: str | os.PathLike) -> tuple[list[np.ndarray], dict]:
    """Read a partition written by :func:`save_partition`.

    Returns ``(parts, meta)``; ``meta`` contains the stored metadata including ``hash``
    and ``n_clients``, plus ``class_counts`` (list of lists) and ``sizes`` (list).
    Raises ``PartitionIntegrityError`` (a ``ValueError``) naming the file if it cannot be read or the
    stored hash does not match the stored indices.
    """
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            meta = json.loads(str(z["meta_json"][()]))
            k = int(meta["n_clients"])
            parts = [z[f"client_{j}"].astype(np.int64, copy=False) for j in range(k)]
            meta["class_counts"] = z["class_counts"].astype(np.int64).tolist()
            meta["sizes"] = z["sizes"].astype(np.int64).tolist()
    except FileNotFoundError:
        raise
    except Exception as e:  # a damaged zip/npy/JSON member: BadZipFile, zlib.error, ValueError, KeyError, ...
        raise PartitionIntegrityError(f"partition file {path} is corrupt or unreadable ({type(e).__name__}: {e}); delete it "
                         "and rerun (the partition job rewrites it from the seed)") from e
    actual = partition_hash(parts)
    if actual != meta.get("hash"):
        raise PartitionIntegrityError(
            f"partition file {path} is corrupt: stored hash {meta.get('hash')} != computed {actual}"
        )
    return parts, meta


def plot_partition(class_counts: Any, path: str | os.PathLike, title: str = "") -> None:
    """Heatmap of a ``(K, C)`` class-count matrix (clients on y, classes on x) saved as PNG.

    Uses :class:`matplotlib.figure.Figure` with the Agg canvas directly, so no pyplot
    state is created. Cells are annotated when ``K*C <= 400``; a side bar shows each
    client's total.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    counts = np.asarray(class_counts)
    if counts.ndim != 2 or counts.shape[0] == 0 or counts.shape[1] == 0:
        raise ValueError(f"class_counts must be a non-empty 2-D (K, C) array, got {counts.shape}")
    k, c = counts.shape
    totals = counts.sum(axis=1)

    width = min(4.0 + 0.5 * c, 24.0)
    height = min(2.5 + 0.35 * k, 16.0)
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(1, 3, width_ratios=[max(c, 4), max(c / 5.0, 1.2), 0.35], wspace=0.08)
    ax = fig.add_subplot(gs[0, 0])
    ax_tot = fig.add_subplot(gs[0, 1], sharey=ax)
    cax = fig.add_subplot(gs[0, 2])

    im = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_xticks(np.arange(c) if c <= 50 else np.linspace(0, c - 1, 11).astype(int))
    yt = np.arange(k) if k <= 50 else np.unique(np.linspace(0, k - 1, 26).astype(int))
    ax.set_yticks(yt)

    if k * c <= 400:
        vmax = counts.max() if counts.max() > 0 else 1
        fs = 8 if k * c <= 100 else 6
        for i in range(k):
            for j in range(c):
                v = counts[i, j]
                ax.text(
                    j, i, str(int(v)) if np.issubdtype(counts.dtype, np.integer) else f"{v:.3g}",
                    ha="center", va="center", fontsize=fs,
                    color="black" if v > 0.6 * vmax else "white",
                )

    ax_tot.barh(np.arange(k), totals, color="0.5", height=0.8)
    ax_tot.set_xlabel("total")
    ax_tot.tick_params(axis="y", labelleft=False)
    if k <= 50:
        for i, t in enumerate(totals):
            ax_tot.text(t, i, f" {int(t)}", va="center", ha="left", fontsize=7)
        ax_tot.set_xlim(0, max(totals.max(), 1) * 1.35)

    fig.colorbar(im, cax=cax, label="count")
    if title:
        ax.set_title(title)

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_target(out, keep_suffix=True) as tmp:  # never a half-written figure (a full disk: named)
        fig.savefig(tmp, dpi=120, format="png", bbox_inches="tight")
