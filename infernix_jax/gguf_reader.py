"""One memory-mapped `gguf.GGUFReader` per GGUF file version and process.

Parsing a file's metadata takes seconds when its tokenizer holds ~50k tokens and merges
(gguf-py slices the memory map element by element), and loading one model reads the file four
times: the weights, the tokenizer, the constraint vocabulary and the chat template. They share
the reader this module keeps: the file is parsed once. Readers only read (a memory map opened
read-only); a file rewritten at the same path (another size or modification time) is parsed
again.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["open_reader"]


@functools.lru_cache(maxsize=4)
def _reader(path: str, size: int, mtime_ns: int):
  del size, mtime_ns  # the key: a rewritten file is another entry
  import gguf  # pylint: disable=import-outside-toplevel  # only GGUF loads need it

  return gguf.GGUFReader(path)


def open_reader(path: str | Path):
  """The `gguf.GGUFReader` of `path` (shared: never write through it).

  Raises:
    FileNotFoundError: `path` is not a file (the message names it).
  """
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"GGUF file {path} does not exist")
  stat = path.stat()
  return _reader(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
