"""One memory-mapped `gguf.GGUFReader` per GGUF file version and process.

Parsing a file's metadata takes seconds when its tokenizer holds ~50k tokens and merges
(gguf-py slices the memory map element by element), and loading one model reads the file four
times: the weights, the tokenizer, the constraint vocabulary and the chat template. They share
the reader this module keeps: the file is parsed once. Readers only read (a memory map opened
read-only); a file rewritten at the same path (another size or modification time) is parsed
again.

The reader is gguf-py's `GGUFReader` with its element reads made cheap (`_FastReader`):
gguf-py slices its `numpy.memmap` once per element, and the memmap subclass makes each slice
cost microseconds (SmolLM2's 49k-token file: 5-7 s to parse; a Qwen3 vocabulary: over 30 s).
Slices of a plain ndarray view of the same map, and arrays of strings and numbers walked in
one loop, give the same fields, parts and tensors in about a tenth of the time.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["open_reader"]


@functools.cache
def _reader_class():
  """`_FastReader`, defined on first use: only GGUF loads import gguf."""
  import gguf  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel

  array, string = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING

  class _FastReader(gguf.GGUFReader):
    """`gguf.GGUFReader` with the same fields, parts and tensors, read from a plain ndarray
    view of the memory map (gguf-py's internal `_get` and `_get_field_parts` overridden;
    files in the other byte order and nested arrays take gguf-py's own path)."""

    _plain = None  # uint8 ndarray view of self.data

    def _get(self, offset, dtype, count=1, override_order=None):
      plain = self._plain
      if plain is None or plain.base is not self.data:
        plain = self._plain = self.data.view(np.ndarray)
      dtype = np.dtype(dtype)
      count = int(count)
      arr = plain[offset:offset + dtype.itemsize * count].view(dtype)[:count]
      order = self.byte_order if override_order is None else override_order
      return arr if order == "I" else arr.view(arr.dtype.newbyteorder(order))

    def _get_field_parts(self, orig_offs, raw_type):
      if raw_type != array or self.byte_order != "I":
        return super()._get_field_parts(orig_offs, raw_type)
      raw_itype = self._get(orig_offs, np.uint32)
      length = self._get(orig_offs + 4, np.uint64)
      item_type = gguf.GGUFValueType(int(raw_itype[0]))
      count, offs, plain = int(length[0]), orig_offs + 12, self._plain
      parts, data = [raw_itype, length], []
      if item_type == string:  # each item: its u64 length part, then its bytes part
        view = memoryview(plain)
        for _ in range(count):
          n = int.from_bytes(view[offs:offs + 8], "little")
          parts += (plain[offs:offs + 8].view(np.uint64), plain[offs + 8:offs + 8 + n])
          data.append(len(parts) - 1)
          offs += 8 + n
        return offs - orig_offs, parts, data, [array, string]
      scalar = self.gguf_scalar_to_np.get(item_type)
      if scalar is None:
        return super()._get_field_parts(orig_offs, raw_type)
      size = np.dtype(scalar).itemsize
      values = plain[offs:offs + size * count].view(scalar)
      parts += [values[i:i + 1] for i in range(count)]
      return 12 + size * count, parts, list(range(2, 2 + count)), [array, item_type]

  return _FastReader


@functools.lru_cache(maxsize=4)
def _reader(path: str, size: int, mtime_ns: int):
  del size, mtime_ns  # the key: a rewritten file is another entry
  return _reader_class()(path)


def open_reader(path: str | Path):
  """The `gguf.GGUFReader` of `path` (a `_FastReader`; shared: never write through it).

  Raises:
    FileNotFoundError: `path` is not a file (the message names it).
  """
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"GGUF file {path} does not exist")
  stat = path.stat()
  return _reader(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
