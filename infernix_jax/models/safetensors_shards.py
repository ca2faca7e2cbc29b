"""Safetensors checkpoints read one shard at a time and one tensor at a time.

A Hugging Face checkpoint directory holds `model.safetensors`, or shards
`model-0000i-of-0000n.safetensors` listed by `model.safetensors.index.json`. A safetensors
file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape, byte
offsets) and the tensors' raw bytes. `iter_tensors` hands out each tensor as a
`StoredTensor`, which reads it whole or in chunks of rows with `readinto` into fresh numpy
arrays of the stored dtype (bfloat16 through `ml_dtypes`): no memory map stays resident and
no shard is ever held whole, so reading costs one chunk of host memory at a time.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import ml_dtypes
import numpy as np

INDEX = "model.safetensors.index.json"
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
           "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32, "I16": np.int16,
           "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  """Where one tensor lies in its file: stored dtype, shape, absolute byte range."""

  dtype: str  # the safetensors dtype name ("BF16", "F32", ...)
  shape: tuple[int, ...]
  begin: int  # absolute offset of the first byte in the file
  end: int


def read_header(path: Path) -> dict[str, TensorInfo]:
  """The tensors of one safetensors file, in file order (the `__metadata__` entry skipped).

  Raises:
    ValueError: the file is not a safetensors file (the message names it).
  """
  with open(path, "rb") as f:
    head = f.read(8)
    if len(head) != 8:
      raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
    (length,) = struct.unpack("<Q", head)
    try:
      header = json.loads(f.read(length))
    except (ValueError, UnicodeDecodeError, MemoryError, OverflowError) as err:
      raise ValueError(f"{path}: not a safetensors file (unreadable header: {err})") from None
  start = 8 + length
  infos = {}
  for name, entry in header.items():
    if name == "__metadata__":
      continue
    begin, end = entry["data_offsets"]
    infos[name] = TensorInfo(entry["dtype"], tuple(entry["shape"]), start + begin, start + end)
  return dict(sorted(infos.items(), key=lambda item: item[1].begin))


def shard_files(directory: Path) -> list[Path]:
  """The safetensors files of a checkpoint directory, shards in index order.

  Raises:
    FileNotFoundError: no safetensors file, or a shard the index names is missing.
    ValueError: an index without a weight_map.
  """
  index = directory / INDEX
  if index.exists():
    weight_map = json.loads(index.read_text()).get("weight_map")
    if not weight_map:
      raise ValueError(f"{index} has no weight_map")
    files = [directory / name for name in sorted(set(weight_map.values()))]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
      raise FileNotFoundError(f"{index} names shards that are not in {directory}: {missing}")
    return files
  files = sorted(directory.glob("*.safetensors"))
  if not files:
    raise FileNotFoundError(f"no *.safetensors files in {directory}")
  return files


@dataclasses.dataclass(frozen=True)
class StoredTensor:
  """One tensor of an open safetensors file, read on request (valid until the next tensor
  of the iteration that handed it out)."""

  name: str
  info: TensorInfo
  file: BinaryIO
  path: Path

  @property
  def dtype(self) -> np.dtype:
    if self.info.dtype not in _DTYPES:
      raise ValueError(f"{self.path}: tensor {self.name!r} has dtype {self.info.dtype}, "
                       f"which is not supported (expected one of {sorted(_DTYPES)})")
    return np.dtype(_DTYPES[self.info.dtype])

  def _rows(self, begin: int, count: int) -> np.ndarray:
    """Rows [begin, begin + count) of the tensor (axis 0; a scalar has one row)."""
    shape = self.info.shape
    row = self.dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    out = np.empty((count, *shape[1:]) if shape else (), self.dtype)
    self.file.seek(self.info.begin + begin * row)
    if self.file.readinto(memoryview(out.reshape(-1).view(np.uint8))) != out.nbytes:
      raise ValueError(f"{self.path}: the file ends inside tensor {self.name!r} (truncated "
                       f"shard?)")
    return out

  def _check_size(self) -> None:
    size = self.dtype.itemsize * int(np.prod(self.info.shape, dtype=np.int64))
    if size != self.info.end - self.info.begin:
      raise ValueError(f"{self.path}: {self.info.end - self.info.begin} bytes stored for "
                       f"tensor {self.name!r}, {self.info.dtype} {list(self.info.shape)} "
                       f"({size} bytes)")

  def read(self) -> np.ndarray:
    """The whole tensor, a new array of its stored dtype and shape."""
    self._check_size()
    return self._rows(0, self.info.shape[0] if self.info.shape else 1)

  def chunks(self, max_bytes: int) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) pieces of the tensor along axis 0, each a new array of at most
    `max_bytes` (at least one row), in order."""
    self._check_size()
    if not self.info.shape:
      yield 0, self._rows(0, 1)
      return
    total = self.info.shape[0]
    row = self.dtype.itemsize * int(np.prod(self.info.shape[1:], dtype=np.int64))
    step = max(1, max_bytes // max(row, 1))
    for begin in range(0, total, step):
      yield begin, self._rows(begin, min(step, total - begin))


def iter_tensors(directory: Path, wanted: Callable[[str, TensorInfo], bool] | None = None
                 ) -> Iterator[StoredTensor]:
  """Every tensor of a checkpoint directory, shard after shard in file order, as a
  `StoredTensor` to read before asking for the next; `wanted(name, info)` False skips a
  tensor unread. One shard file is open at a time."""
  for path in shard_files(directory):
    infos = read_header(path)
    with open(path, "rb") as f:
      for name, info in infos.items():
        if wanted is None or wanted(name, info):
          yield StoredTensor(name, info, f, path)
