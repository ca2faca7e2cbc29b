"""A run directory: the resolved config, the environment, and `runs.jsonl`.

  results/<study>/<timestamp>[-shard<i>of<n>]/
    config.json        the resolved study config (grid included)
    environment.json   package versions, git revision, device
    runs.jsonl         one JSON object per line: requests, measurements, and one
                       {"kind": "cell", "status": "ok" | "error", ...} line closing each cell
    summary.md, *.png  written by the report

Resume: the newest directory of the same study, config and shard is reused, and cells it
closed with status "ok" are skipped; lines of cells that failed or never closed are dropped
(those cells run again).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable

CONFIG = "config.json"
ENVIRONMENT = "environment.json"
RUNS = "runs.jsonl"


def canonical(config_dict: dict) -> str:
  return json.dumps(config_dict, sort_keys=True, default=str)


def read_records(run_dir: Path) -> list[dict]:
  """Every record of a run directory (a torn last line, from a killed run, is skipped)."""
  path = Path(run_dir) / RUNS
  if not path.exists():
    return []
  out = []
  for line in path.read_text().splitlines():
    try:
      out.append(json.loads(line))
    except json.JSONDecodeError:
      continue
  return out


def closed_ok(records: Iterable[dict]) -> set[str]:
  return {r["cell"] for r in records if r.get("kind") == "cell" and r.get("status") == "ok"}


class RunDir:
  """Appends records to one run directory."""

  def __init__(self, path: Path):
    self.path = Path(path)
    self.path.mkdir(parents=True, exist_ok=True)
    records = read_records(self.path)
    self.done = closed_ok(records)
    kept = [r for r in records if r.get("cell") in self.done]
    (self.path / RUNS).write_text("".join(json.dumps(r) + "\n" for r in kept))
    self._f = (self.path / RUNS).open("a")

  @classmethod
  def open(cls, results_dir: Path, study: str, config_dict: dict, environment: dict,
           shard: tuple[int, int], *, resume: bool = True, run_dir: str = "") -> "RunDir":
    """The run directory for this study, config and shard (resumed or new).

    Args:
      run_dir: an explicit directory (resumed if it has this config; refused otherwise).
    Raises:
      ValueError: `run_dir` holds a different config.
    """
    suffix = f"-shard{shard[0]}of{shard[1]}" if shard[1] > 1 else ""
    want = canonical(config_dict)
    if run_dir:
      path = Path(run_dir)
      if (path / CONFIG).exists() and canonical(json.loads((path / CONFIG).read_text())) != want:
        raise ValueError(f"--run_dir={run_dir}: holds a different config; choose a new folder")
    else:
      path = None
      base = Path(results_dir) / study
      if resume and base.is_dir():
        for old in sorted(base.iterdir(), reverse=True):
          if (old.name.endswith(suffix) and (suffix or "-shard" not in old.name)
              and (old / CONFIG).exists()
              and canonical(json.loads((old / CONFIG).read_text())) == want):
            path = old
            break
      if path is None:
        path = base / (time.strftime("%Y%m%d-%H%M%S") + suffix)
        while path.exists():
          time.sleep(1)
          path = base / (time.strftime("%Y%m%d-%H%M%S") + suffix)
    out = cls(path)
    (out.path / CONFIG).write_text(json.dumps(config_dict, indent=1, sort_keys=True,
                                              default=str) + "\n")
    (out.path / ENVIRONMENT).write_text(json.dumps(environment, indent=1) + "\n")
    return out

  def append(self, cell: str, record: dict) -> None:
    self._f.write(json.dumps({"cell": cell, **record}, default=_jsonable) + "\n")
    self._f.flush()

  def close(self) -> None:
    self._f.close()


def _jsonable(value):
  import numpy as np

  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, (set, frozenset, tuple)):
    return list(value)
  return str(value)
