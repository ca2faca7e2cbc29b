"""The index of published results: `docs/results/README.md`, written by
`python -m experiments.report --index`.

One entry per study config variant that publishes (a non-empty `publish_dir`), in config file
order: its question (the config's `question`), its headline figure with interval (the
study's `headline(records, config)` over the committed run directory `run/`, or over the
run directories under it, `run/<dir>/`, merged: a sweep's shards, or cells run again), its
plots inline, its config and command, and the date and revision of the published run.
Variants whose reports are not published yet are listed apart, and so are the benchmark reports
beside them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path("docs/results")
INDEX = RESULTS / "README.md"
_PLOT = re.compile(r"!\[([^\]]*)\]\(([^)]+\.png)\)")


def _config_variants(configs_dir: Path):
  """(config file relative to the root, variant, ConfigDict) of every variant of every config."""
  for path in sorted(configs_dir.glob("*.py")):
    if path.name.startswith("_"):
      continue
    spec = importlib.util.spec_from_file_location(f"_index_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for variant in getattr(module, "VARIANTS", ("",)):
      yield path, variant, module.get_config(variant) if variant else module.get_config()


def _question(config) -> str:
  """The config's `question`, else its description's first sentence, else its title."""
  if config.get("question"):
    return config.question
  text = " ".join(str(config.get("description", "")).split())
  first = re.split(r"(?<=[.?!])\s", text, maxsplit=1)[0] if text else ""
  return first or str(config.get("title", config.get("study", "")))


def _published_on(root: Path, summary: Path) -> str:
  """The date of the commit that last changed the published summary (ISO day), or
  'uncommitted'."""
  try:
    out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(summary)], cwd=root,
                         capture_output=True, text=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    out = ""
  return out or "uncommitted"


def _run_dirs(run: Path) -> list[Path]:
  """The committed run directories of a study: `run/` itself, or the run directories under it,
  `run/<dir>/` in name order (a sharded sweep's shards, or cells run again, named by start
  time: merged as `experiments.report` merges them, a later run superseding an earlier)."""
  if (run / "config.json").exists():
    return [run]
  return sorted(d for d in run.glob("*/") if (d / "config.json").exists()) if run.is_dir() \
      else []


def _headline(run_dirs: list[Path], config_dict: dict) -> str:
  """The study's headline figure over the committed run directories ("" where the study has
  no headline or no run directory is committed)."""
  import ml_collections

  from experiments import report, studies

  if not run_dirs:
    return ""
  study = studies.get(config_dict["study"])
  if not hasattr(study, "headline"):
    return ""
  _, records, _ = report.merge(run_dirs)
  return study.headline(records, ml_collections.ConfigDict(config_dict)) or ""


def build(root: Path = ROOT, out: Path | None = None) -> Path:
  """Writes the index (default `docs/results/README.md` under `root`) and returns its path.

  Raises:
    ValueError: two variants publishing to one folder (the index could not tell them apart).
  """
  root = Path(root)
  out = Path(out) if out else root / INDEX
  published, pending, seen = [], [], {}
  for path, variant, config in _config_variants(root / "configs"):
    folder = config.get("publish_dir", "")
    if not folder:
      continue
    arg = f"configs/{path.name}" + (f":{variant}" if variant else "")
    if folder in seen:
      raise ValueError(f"{arg} and {seen[folder]} both publish to {folder}: give each its own "
                       "publish_dir")
    seen[folder] = arg
    summary = root / folder / "summary.md"
    command = f"python -m experiments.run --config={arg} --publish"
    if not summary.exists():
      pending.append((config, arg, folder, command))
      continue
    published.append((config, arg, folder, command, summary))

  rel = lambda p: Path(os.path.relpath(Path(p).resolve(), out.parent.resolve())).as_posix()  # noqa: E731
  lines = ["# Results", "",
           "Written by `python -m experiments.report --index` from the study configs and the "
           "reports they published; rerun it after publishing. Each headline figure is "
           "computed from the committed run directory (`run/`, or the run directories "
           "under it merged) with its 95% bootstrap "
           "interval; the study's summary states the unit of resampling.", ""]
  for config, arg, folder, command, summary in published:
    run_dirs = _run_dirs(root / folder / "run")
    revisions = []
    for run_dir in run_dirs:
      env_file = run_dir / "environment.json"
      git = json.loads(env_file.read_text()).get("git", {}) if env_file.exists() else {}
      revision = ((git.get("revision") or "unknown")[:10]
                  + (" (dirty)" if git.get("dirty") else ""))
      revisions += [revision] if revision not in revisions else []
    revision = ", ".join(revisions) or "unknown"
    headline = (_headline(run_dirs, json.loads((run_dirs[0] / "config.json").read_text()))
                if run_dirs else "")
    lines += [f"## {config.get('title') or config.study}", "",
              f"**Question.** {_question(config)}", ""]
    if headline:
      lines += [f"**Headline.** {headline}", ""]
    lines += [f"Report: [{rel(summary)}]({rel(summary)}) · config `{arg}` · "
              f"`{command}` · published {_published_on(root, summary)} at git {revision}"
              + ("" if run_dirs else " · run directory not committed")
              + (f" · {len(run_dirs)} run directories merged" if len(run_dirs) > 1 else ""),
              ""]
    pages = sorted((summary.parent / "traces").glob("*.html"))  # NNN-<cell>.html
    if pages:
      cells: dict[str, list[Path]] = {}
      for page in pages:
        cells.setdefault(page.stem.split("-", 1)[-1], []).append(page)
      lines += ["Per-token trace pages, by cell: " + "; ".join(
          f"{cell.replace('-', ' ')}: " + " · ".join(f"[{i + 1}]({rel(page)})"
                                                   for i, page in enumerate(group))
          for cell, group in cells.items()), ""]
    for alt, png in _PLOT.findall(summary.read_text()):
      if (summary.parent / png).exists():
        lines += [f"![{alt}]({rel(summary.parent / png)})", ""]
  if pending:
    lines += ["## Not published yet", "", "| config | publishes to | command |", "|---|---|---|"]
    lines += [f"| `{arg}` | `{folder}` | `{command}` |" for _, arg, folder, command in pending]
    lines.append("")
  folders = {(root / f).resolve() for f in seen}
  others = sorted(p for p in (root / RESULTS).glob("*.md")
                  if p.resolve() != out.resolve() and p.parent.resolve() not in folders)
  if others:
    lines += ["## Benchmark and earlier reports", "",
              "Written by the benchmark scripts named in each report.", ""]
    for p in others:
      title = next((l.lstrip("# ").strip() for l in p.read_text().splitlines()
                    if l.startswith("#")), p.stem)
      lines.append(f"- [{title}]({rel(p)})")
    lines.append("")
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text("\n".join(lines).rstrip() + "\n")
  return out
