"""Safetensors checkpoints read one shard at a time and one tensor at a time.

A Hugging Face checkpoint directory holds `model.safetensors`, or shards
`model-0000i-of-0000n.safetensors` listed by `model.safetensors.index.json`. A safetensors
file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape, byte
offsets) and the tensors' raw bytes. `iter_tensors` reads each tensor it is asked for with
one `readinto` into a fresh numpy array of the stored dtype (bfloat16 through `ml_dtypes`):
no memory map stays resident and no shard is ever held whole, so reading costs one tensor of
host memory at a time.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import Callable, Iterator

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


def read_tensor(f, info: TensorInfo, path: Path | str = "") -> np.ndarray:
  """One tensor read from the open binary file `f` into a new array of its stored dtype.

  Raises:
    ValueError: an unknown dtype, or a byte range that does not match the shape.
  """
  if info.dtype not in _DTYPES:
    raise ValueError(f"{path}: tensor dtype {info.dtype} is not supported "
                     f"(expected one of {sorted(_DTYPES)})")
  out = np.empty(info.shape, _DTYPES[info.dtype])
  if out.nbytes != info.end - info.begin:
    raise ValueError(f"{path}: {info.end - info.begin} bytes stored for a {info.dtype} tensor "
                     f"of shape {list(info.shape)} ({out.nbytes} bytes)")
  f.seek(info.begin)
  view = memoryview(out.reshape(-1).view(np.uint8))
  if f.readinto(view) != out.nbytes:
    raise ValueError(f"{path}: the file ends inside a tensor (truncated shard?)")
  return out


def iter_tensors(directory: Path, wanted: Callable[[str, TensorInfo], bool] | None = None
                 ) -> Iterator[tuple[str, np.ndarray]]:
  """(name, array) for every tensor of a checkpoint directory, shard after shard, each tensor
  in its stored dtype and shape; `wanted(name, info)` False skips a tensor unread. Each array
  is new: the caller may keep it or drop it before the next is read."""
  for path in shard_files(directory):
    infos = read_header(path)
    with open(path, "rb") as f:
      for name, info in infos.items():
        if wanted is None or wanted(name, info):
          yield name, read_tensor(f, info, path)
