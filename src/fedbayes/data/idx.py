"""Reader/writer for the IDX format used by (Fashion-)MNIST.

Layout (all integers big-endian): two zero bytes, one type-code byte, one byte
giving the number of dimensions ``ndim``, then ``ndim`` uint32 sizes, then the
data in C order.  Files may be gzip-compressed (detected by magic bytes).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

# type code -> big-endian numpy dtype
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {dt.newbyteorder("="): code for code, dt in IDX_DTYPES.items()}

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: Path | str) -> bytes:
    """Return the (decompressed, if gzip) content of ``path``."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == GZIP_MAGIC else open
    with opener(path, "rb") as fh:
        return fh.read()


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse IDX ``data`` into a native-byte-order array; ValueError if malformed."""
    if len(data) < 4:
        raise ValueError(f"{source}: too short for an IDX header ({len(data)} bytes)")
    if data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise ValueError(f"{source}: bad IDX magic {data[:4].hex()}")
    dtype, ndim = IDX_DTYPES[data[2]], data[3]
    if ndim == 0:
        raise ValueError(f"{source}: IDX with zero dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{source}: truncated IDX header")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise ValueError(
            f"{source}: IDX payload is {len(data) - header} bytes, "
            f"expected {expected} for shape {shape} {dtype}"
        )
    arr = np.frombuffer(data, dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))  # copy: writable, native order


def read_idx(path: Path | str) -> np.ndarray:
    """Read an IDX file (raw or gzip-compressed)."""
    return parse_idx(read_bytes(path), str(path))


def to_idx_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr)
    code = _CODES.get(arr.dtype.newbyteorder("="))
    if code is None or arr.ndim == 0 or arr.ndim > 255:
        raise ValueError(f"cannot write dtype {arr.dtype} / ndim {arr.ndim} as IDX")
    head = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, ">u4").tobytes()
    return head + np.ascontiguousarray(arr, IDX_DTYPES[code]).tobytes()


def write_idx(path: Path | str, arr: np.ndarray, compress: bool | None = None) -> Path:
    """Write ``arr`` as IDX; gzip if ``compress`` (default: path ends in .gz)."""
    path = Path(path)
    data = to_idx_bytes(arr)
    if compress is None:
        compress = path.suffix == ".gz"
    if compress:
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path
