"""Tabular datasets (UCI Credit Approval, FLamby-Heart): registered on import.

Both are binary tasks; :class:`~fedbayes.data.registry.Arrays` hold ``x`` as
float32 ``(N, D)`` and ``y`` as int64 ``(N,)`` with ``n_classes = 2``.

Checksums
---------
The official md5s of the UCI files are not known to this project (they are
not published, and nothing here downloads).  The registry cannot fetch a file
without a checksum (``sources.check_file`` refuses), and we do not invent one.
So every file is registered with ``md5 = UNPINNED`` (the string
``"unpinned"``), which no file matches: ``fetch`` reports the md5 it *got*
for each candidate and fails with the ``fix_hint``; ``load`` refuses a file
placed by hand.  Once a copy has been verified independently (e.g. against
the UCI archive), pin its md5 with :func:`pin_md5` (re-registers the spec);
from then on the file is verified like any other.

``uci_credit`` -- UCI Credit Approval (Quinlan; ``crx.data``), spec §4.1
------------------------------------------------------------------------
* ``crx.data``: comma separated, 16 columns (A1..A15, class ``+``/``-``),
  690 rows, ``?`` for a missing value.
* Rows with any ``?`` are dropped (690 -> 653 on the real file).
* The rows are shuffled with ``np.random.RandomState(0).permutation`` (PVI's
  "shuffle with seed 0" used numpy's legacy RandomState).
* Numeric columns ``[1, 2, 7, 10, 13, 14]`` are standardised with
  StandardScaler semantics (mean and population std, std 0 -> 1) fitted on all
  kept rows, as PVI did (so test statistics leak into the scaling; faithful).
* Categorical columns ``[0, 3, 4, 5, 6, 8, 9, 11, 12]`` are one-hot encoded,
  categories sorted as strings, no category dropped.
* Feature order: the 6 standardised numeric columns (in the order above), then
  the one-hot blocks (columns in the order above).
* ``y = 1`` for ``+`` (the 45% class), ``0`` for ``-`` -- set explicitly, so
  that the PVI heterogeneous split gives its 6% / 66% positive rates.
* Split after the shuffle: ``n_test = ceil(0.2 n)``, train = the first
  ``n - n_test`` rows (522 / 131 on the real file).
* The PVI heterogeneous clients are a partition scheme
  (``fedbayes.partition.schemes.pvi_heterogeneous``).

``flamby_heart`` -- FLamby Fed-Heart-Disease (UCI heart disease), spec §4.1
---------------------------------------------------------------------------
* Four centres, in this order (centre ids 0..3): ``processed.cleveland.data``,
  ``processed.hungarian.data``, ``processed.switzerland.data``,
  ``processed.va.data``; each comma separated with 14 columns (13 features
  then ``num``), ``?`` for a missing value.
* Per centre: drop columns 10, 11, 12 (slope, ca, thal), then drop rows with
  any missing value; label ``y = (num > 0)``.
* ``cp`` (column 2) and ``restecg`` (column 6) are one-hot encoded with
  drop_first; the categories are the sorted union over all four centres (so
  every centre has the same columns).  Feature order: the 8 other columns in
  file order (age, sex, trestbps, chol, fbs, thalach, exang, oldpeak), then the
  cp dummies, then the restecg dummies (pandas ``get_dummies`` order): 13
  features on the real files.
* Per centre: ``sklearn.model_selection.train_test_split(test_size=0.34,
  random_state=43, stratify=y)`` on the centre's rows in file order (the split
  depends only on y and the sizes, so it equals FLamby's); expected train/test
  199/104, 172/89, 30/16, 85/45 (486 / 254).
* Train (test) = concatenation of the centres' train (test) parts, centre
  order as above, rows in the order train_test_split returns them.
* All features are standardised with the mean / population std of all
  centres' training rows (std 0 -> 1).
* :func:`flamby_centres` returns the centre id of every train / test row,
  computed by the same code path as the loader.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Mapping

import numpy as np

from .registry import (
    DEFAULT_ROOT,
    Arrays,
    DatasetSpec,
    _fetched_dir,
    _verify,
    get_spec,
    register,
)
from .sources import DataIntegrityError, FileSpec

SPECS: list[DatasetSpec] = []   # this module's datasets (the registry reads them; nothing registers on import)

UNPINNED = "unpinned"  # md5 placeholder that no file matches; see module docstring

_PIN_HINT = ("the official md5 of {files} is not pinned in fedbayes, so no copy is accepted "
             "unverified: obtain the file(s) from {url} (mirror dir via FEDBAYES_DATA_MIRRORS, or "
             "download=True), check the copy independently, then pin its md5 with "
             "fedbayes.data.tabular.pin_md5({name!r}, {{file name: md5}}) (the error above lists "
             "the md5 each source gave)")


def pin_md5(name: str, md5s: Mapping[str, str]) -> DatasetSpec:
    """Re-register dataset ``name`` with the given (verified) md5 for each named file."""
    spec = get_spec(name)
    known = {f.name for f in spec.files}
    unknown = set(md5s) - known
    if unknown:
        raise KeyError(f"{name}: no file(s) {sorted(unknown)}; files are {sorted(known)}")
    files = tuple(replace(f, md5=md5s[f.name].lower()) if f.name in md5s else f
                  for f in spec.files)
    return register(replace(spec, files=files), overwrite=True)


# ------------------------------------------------------------------ helpers
def _read_rows(path: Path, n_cols: int) -> list[list[str]]:
    """Comma-separated text rows (blank lines skipped), each checked to have ``n_cols`` fields."""
    rows = []
    with open(path, encoding="ascii") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            fields = [s.strip() for s in line.split(",")]
            if len(fields) != n_cols:
                raise DataIntegrityError(f"{path}:{lineno}: expected {n_cols} comma-separated "
                                         f"fields, got {len(fields)}")
            rows.append(fields)
    return rows


def _to_float(rows: list[list[str]], cols: list[int], path: Path) -> np.ndarray:
    try:
        return np.array([[float(r[c]) for c in cols] for r in rows], dtype=np.float64
                        ).reshape(len(rows), len(cols))
    except ValueError as exc:
        raise DataIntegrityError(f"{path}: non-numeric value in a numeric column: {exc}") from None


def _standardise(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(x - mean) / std with ``ref``'s mean and population std (StandardScaler; std 0 -> 1)."""
    mean = ref.mean(axis=0) if len(ref) else np.zeros(x.shape[1])
    std = ref.std(axis=0) if len(ref) else np.ones(x.shape[1])
    std = np.where(std > 0, std, 1.0)
    return (x - mean) / std


def _one_hot(values: np.ndarray, categories: np.ndarray) -> np.ndarray:
    return (values[:, None] == categories[None, :]).astype(np.float64)


# --------------------------------------------------------------- UCI Credit
CREDIT_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/credit-screening/"
CREDIT_FILE = "crx.data"
CREDIT_N_COLS = 16
CREDIT_NUMERIC = [1, 2, 7, 10, 13, 14]
CREDIT_CATEGORICAL = [0, 3, 4, 5, 6, 8, 9, 11, 12]
CREDIT_LABEL_COL = 15
CREDIT_SHUFFLE_SEED = 0
CREDIT_TEST_FRACTION = 0.2


def load_credit(spec: DatasetSpec, d: Path) -> Arrays:
    path = d / spec.file("all").name
    rows = [r for r in _read_rows(path, CREDIT_N_COLS) if "?" not in r]
    labels = [r[CREDIT_LABEL_COL] for r in rows]
    bad = sorted(set(labels) - {"+", "-"})
    if bad:
        raise DataIntegrityError(f"{path}: labels must be '+' or '-', got {bad}")
    n = len(rows)
    perm = np.random.RandomState(CREDIT_SHUFFLE_SEED).permutation(n)
    rows = [rows[i] for i in perm]
    y = np.array([1 if r[CREDIT_LABEL_COL] == "+" else 0 for r in rows], dtype=np.int64)
    num = _to_float(rows, CREDIT_NUMERIC, path)
    blocks = [_standardise(num, num)]
    for c in CREDIT_CATEGORICAL:
        vals = np.array([r[c] for r in rows], dtype=object)
        blocks.append(_one_hot(vals, np.array(sorted(set(vals.tolist())), dtype=object)))
    x = np.concatenate(blocks, axis=1).astype(np.float32) if n else np.zeros((0, 0), np.float32)
    n_test = math.ceil(CREDIT_TEST_FRACTION * n)
    n_train = n - n_test
    return Arrays(x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:],
                  y_test=y[n_train:], n_classes=spec.n_classes)


SPECS.append(DatasetSpec(
    name="uci_credit",
    stand_in="fedbayes.data.standin_files:_gen_credit",
    description=("UCI Credit Approval (Quinlan 1987), crx.data: 653 complete rows, "
                 "standardised numeric + one-hot categorical, 522/131, '+' = 1"),
    files=(FileSpec(CREDIT_FILE, UNPINNED, None, "all"),),
    loader=load_credit,
    n_classes=2,
    n_train=522,
    n_test=131,
    urls=(CREDIT_URL,),
    fix_hint=_PIN_HINT.format(files=CREDIT_FILE, url=CREDIT_URL, name="uci_credit"),
))


# ------------------------------------------------------------- FLamby-Heart
HEART_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/heart-disease/"
HEART_CENTRES = ("cleveland", "hungarian", "switzerland", "va")  # centre ids 0..3
HEART_FILES = tuple(f"processed.{c}.data" for c in HEART_CENTRES)
HEART_N_COLS = 14
HEART_DROP = (10, 11, 12)  # slope, ca, thal
HEART_ONE_HOT = (2, 6)  # cp, restecg (drop_first)
HEART_LABEL_COL = 13
HEART_TEST_SIZE = 0.34
HEART_SPLIT_SEED = 43


def _heart_prepare(spec: DatasetSpec, d: Path) -> tuple[Arrays, np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    keep = [c for c in range(HEART_N_COLS - 1) if c not in HEART_DROP]
    plain = [c for c in keep if c not in HEART_ONE_HOT]
    feats, labels = [], []
    for centre in HEART_CENTRES:
        path = d / spec.file(centre).name
        rows = [r for r in _read_rows(path, HEART_N_COLS)
                if "?" not in (r[c] for c in [*keep, HEART_LABEL_COL])]
        vals = _to_float(rows, [*keep, HEART_LABEL_COL], path)
        if np.isnan(vals).any():
            raise DataIntegrityError(f"{path}: NaN values")
        feats.append(vals[:, :-1])
        labels.append((vals[:, -1] > 0).astype(np.int64))
    allf = np.concatenate(feats)
    cats = {c: np.unique(allf[:, keep.index(c)])[1:] for c in HEART_ONE_HOT}  # drop_first

    def encode(f: np.ndarray) -> np.ndarray:
        blocks = [f[:, [keep.index(c) for c in plain]]]
        blocks += [_one_hot(f[:, keep.index(c)], cats[c]) for c in HEART_ONE_HOT]
        return np.concatenate(blocks, axis=1)

    parts = {"train": ([], [], []), "test": ([], [], [])}
    for cid, (f, y) in enumerate(zip(feats, labels)):
        idx = np.arange(len(y))
        if len(y) >= 2:
            tr, te = train_test_split(idx, test_size=HEART_TEST_SIZE,
                                      random_state=HEART_SPLIT_SEED, stratify=y)
        else:
            tr, te = idx, idx[:0]
        x = encode(f)
        for split, sel in (("train", tr), ("test", te)):
            parts[split][0].append(x[sel])
            parts[split][1].append(y[sel])
            parts[split][2].append(np.full(len(sel), cid, np.int64))
    xtr, ytr, ctr = (np.concatenate(p) for p in parts["train"])
    xte, yte, cte = (np.concatenate(p) for p in parts["test"])
    arrays = Arrays(x_train=_standardise(xtr, xtr).astype(np.float32), y_train=ytr,
                    x_test=_standardise(xte, xtr).astype(np.float32), y_test=yte,
                    n_classes=spec.n_classes)
    return arrays, ctr, cte


def load_heart(spec: DatasetSpec, d: Path) -> Arrays:
    return _heart_prepare(spec, d)[0]


def flamby_centres(root: Path | str = DEFAULT_ROOT, name: str = "flamby_heart",
                   verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Centre id (0..3, order of ``HEART_CENTRES``) of every train row and every test row.

    Same code path as ``load(name, root)``, so ``flamby_centres(root)[0][i]`` is
    the centre of ``load(name, root).x_train[i]``.
    """
    spec = get_spec(name)
    d = _fetched_dir(spec, root)
    if verify:
        _verify(spec, d)
    _, ctr, cte = _heart_prepare(spec, d)
    return ctr, cte


def flamby_client_of_rows(root: Path | str = DEFAULT_ROOT) -> np.ndarray:
    """The hospital of every training row (the ``natural`` partition scheme's clients)."""
    return flamby_centres(root)[0]


SPECS.append(DatasetSpec(
    name="flamby_heart",
    stand_in="fedbayes.data.standin_files:_gen_heart",
    natural_groups=flamby_client_of_rows,
    description=("FLamby Fed-Heart-Disease (Janosi et al. 1988; du Terrail et al. 2022): "
                 "4 hospitals, 13 standardised features, 486/254"),
    files=tuple(FileSpec(f, UNPINNED, None, c) for f, c in zip(HEART_FILES, HEART_CENTRES)),
    loader=load_heart,
    n_classes=2,
    n_train=486,
    n_test=254,
    urls=(HEART_URL,),
    fix_hint=_PIN_HINT.format(files=", ".join(HEART_FILES), url=HEART_URL,
                              name="flamby_heart"),
))
