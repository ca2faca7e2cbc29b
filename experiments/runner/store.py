"""A run directory: the resolved config, the environment, and `runs.jsonl`.

  results/<study>/<timestamp>[-shard<i>of<n>]/
    config.json        the resolved study config (grid included)
    environment.json   package versions, git revision, device
    runs.jsonl         one JSON object per line: requests, measurements, and one
                       {"kind": "cell", "status": "ok" | "error", ...} line closing each cell
    summary.md, *.png  written by the report

Resume: the newest directory of the same study, config and shard is reused, and cells it
closed with status "ok" are skipped; lines of cells that failed or never closed are dropped
(those cells run again). A directory whose done cells another code version ran (git
revision, uncommitted code changes, package versions: `environment.version_differences`)
is refused unless the caller allows mixing; then environment.json keeps the first version
and lists each resume's, and every cell's closing line names the version that ran it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable

from experiments.runner import environment as environment_lib

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

  def __init__(self, path: Path, version: str = ""):
    self.path = Path(path)
    self.version = version  # the code version label each cell's closing line carries
    self.path.mkdir(parents=True, exist_ok=True)
    records = read_records(self.path)
    self.done = closed_ok(records)
    kept = [r for r in records if r.get("cell") in self.done]
    (self.path / RUNS).write_text("".join(json.dumps(r) + "\n" for r in kept))
    self._f = (self.path / RUNS).open("a")

  @classmethod
  def open(cls, results_dir: Path, study: str, config_dict: dict, environment: dict,
           shard: tuple[int, int], *, resume: bool = True, run_dir: str = "",
           across_versions: bool = False) -> "RunDir":
    """The run directory for this study, config and shard (resumed or new).

    Args:
      environment: `environment.collect()` of this process.
      run_dir: an explicit directory (resumed if it has this config; refused otherwise).
      across_versions: resume even where another code version ran the done cells.
    Raises:
      ValueError: `run_dir` holds a different config, or the directory to resume holds cells
        of another code version (naming both) and `across_versions` is off.
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
    environment = _resumed_environment(path, environment, across_versions)
    out = cls(path, environment_lib.version_id(environment.get("resumed", [environment])[-1]))
    (out.path / CONFIG).write_text(json.dumps(config_dict, indent=1, sort_keys=True,
                                              default=str) + "\n")
    (out.path / ENVIRONMENT).write_text(json.dumps(environment, indent=1) + "\n")
    return out

  def append(self, cell: str, record: dict) -> None:
    self._f.write(json.dumps({"cell": cell, **record}, default=_jsonable) + "\n")
    self._f.flush()

  def close(self) -> None:
    self._f.close()


def _resumed_environment(path: Path, now: dict, across_versions: bool) -> dict:
  """The environment.json to write in `path`: `now` for a directory without done cells; else
  the recorded one, refused if the code version that ran its newest cells differs from
  `now`'s (unless `across_versions`), with this resume appended to its "resumed" list."""
  old_file = path / ENVIRONMENT
  if not old_file.exists() or not closed_ok(read_records(path)):
    return now
  old = json.loads(old_file.read_text())
  latest = (old.get("resumed") or [old])[-1]  # the version that ran the newest cells
  differences = environment_lib.version_differences(latest, now)
  if differences and not across_versions:
    raise ValueError(
        f"{path}: its done cells were run by code version {environment_lib.version_id(latest)}, "
        f"this process is {environment_lib.version_id(now)} ({'; '.join(differences)}; then vs "
        "now). Resuming would mix versions in one table: pass --noresume (or a new --run_dir) "
        "to start afresh, or --resume_across_versions to resume and record each cell's version")
  resumes = [*old.get("resumed", []), {k: now[k] for k in ("git", "packages", "started")
                                         if k in now} | {"differences": differences}]
  return {**{k: v for k, v in old.items() if k != "resumed"}, "resumed": resumes}


def _jsonable(value):
  import numpy as np

  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, (set, frozenset, tuple)):
    return list(value)
  return str(value)
