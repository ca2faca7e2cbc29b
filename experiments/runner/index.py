"""The index of published results: `docs/results/README.md`, written by
`python -m experiments.report --index`.

One entry per study config variant that publishes (a non-empty `publish_dir`), in config file
order, featured ones (`featured = True`: the flagship table) first: its question (the config's
`question`), its headline figure with interval (the study's `headline(records, config)` over
the committed run directory `run/`, or over the run directories under it, `run/<dir>/`,
merged: a sweep's shards, or cells run again; where they hold several designs of the config,
those of its current design, else of the newest directory's, and a headline of an earlier
design says so), its plots inline, its config and command (a planned shard split's: `shards`),
and the date and revision of the published run.
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


def _one_design(run_dirs: list[Path], config) -> tuple[list[Path], int]:
  """(the run directories to merge, how many were left out): all of them where they hold one
  config; else those of `config`'s current design, or, where none is, those of the newest
  directory's (a redesigned study whose new shards are committed beside the old ones)."""
  designs = _designs(run_dirs)
  if len(set(designs.values())) <= 1:
    return run_dirs, 0
  want = _canonical(config)
  if want not in designs.values():
    want = designs[run_dirs[-1]]
  kept = [d for d in run_dirs if designs[d] == want]
  return kept, len(run_dirs) - len(kept)


def _designs(run_dirs: list[Path]) -> dict[Path, str]:
  from experiments.runner import store

  return {d: store.canonical(json.loads((d / "config.json").read_text())) for d in run_dirs}


def _canonical(config) -> str:
  from experiments.runner import store

  return store.canonical(config.to_dict())


def _earlier_design(run_dirs: list[Path], config) -> bool:
  """Whether a redesigned study's merged run directories all predate its current design (its
  grid's cells differ): they are another sweep than the one its command runs."""
  import ml_collections

  from experiments.runner import sweep

  if not run_dirs or _canonical(config) in _designs(run_dirs).values():
    return False
  ran = ml_collections.ConfigDict(json.loads((run_dirs[0] / "config.json").read_text()))
  try:
    return {c.id for c in sweep.cells(ran)} != {c.id for c in sweep.cells(config)}
  except ValueError:  # a grid the runner no longer reads
    return True


def _command(arg: str, config) -> str:
  """The command that publishes a study: one run, or its planned shards and their merge."""
  n = int(config.get("shards", 1) or 1)
  if n <= 1:
    return f"python -m experiments.run --config={arg} --publish"
  return (f"python -m experiments.run --config={arg} --shard=i/{n}` for i = 0..{n - 1}, then "
          f"`python -m experiments.report results/{config.study}/*-shard*of{n} --publish")


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
    command = _command(arg, config)
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
  published.sort(key=lambda entry: not entry[0].get("featured", False))  # featured first
  for config, arg, folder, command, summary in published:
    run_dirs, left_out = _one_design(_run_dirs(root / folder / "run"), config)
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
    earlier = _earlier_design(run_dirs, config)
    if headline:
      lines += [f"**Headline{' of its earlier design' if earlier else ''}.** {headline}", ""]
    lines += [f"Report: [{rel(summary)}]({rel(summary)}) · config `{arg}` · "
              f"`{command}` · published {_published_on(root, summary)} at git {revision}"
              + ("" if run_dirs else " · run directory not committed")
              + (f" · {len(run_dirs)} run directories merged" if len(run_dirs) > 1 else "")
              + (f" · {left_out} run directories of another design of the config left out"
                 if left_out else "")
              + (" · the committed run is of an earlier design of the config: its current "
                 "design has not run yet" if earlier else ""),
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
