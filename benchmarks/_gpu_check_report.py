"""The GPU check's report: JSONL -> markdown (docs/results/gpu_check.md) and the dispatch
table entry of each measured device kind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs/results/gpu_check.md"

_TITLES = {
    "host_device": "Host vs device time per decode step (1 lane)",
    "lanes": "Lanes x capacity, unrolled vs stacked (SmolLM2 decode step)",
    "cmdbuf": "Command buffers (SmolLM2, 1 lane)",
    "device_loop": "Device loop vs per-step dispatch (SmolLM2)",
    "dispatch": "Dispatch table: each kernel against its jnp reference, same process",
    "gemm": "Qwen3-8B products (bf16 weights)",
}


def _fmt(value) -> str:
  if isinstance(value, float):
    return f"{value:.4g}"
  if isinstance(value, list):
    return json.dumps(value)
  return str(value)


def _figures(line: dict) -> str:
  if "skipped" in line:
    return f"not measured ({line['skipped']})"
  return "; ".join(f"{k} {_fmt(v)}" for k, v in line["figures"].items())


def _extra(group: str, line: dict, lines: list[dict]) -> str:
  """A derived figure from lines of the same run: lanes' decode(B) / decode(1)."""
  if group != "lanes" or "skipped" in line:
    return ""
  c = line["config"]
  for other in lines:
    oc = other["config"]
    if (other["group"] == "lanes" and "skipped" not in other and oc.get("lanes") == 1
        and oc.get("layout") == c["layout"] and oc.get("capacity") == c["capacity"]
        and other["device_kind"] == line["device_kind"]):
      return (f"; x{line['figures']['ms_per_step'] / other['figures']['ms_per_step']:.2f} "
              f"of B=1")
  return ""


def render(lines: list[dict]) -> str:
  """The markdown report of the JSONL's lines."""
  import gpu_check
  dry = any(line.get("dry_run") for line in lines)
  kinds = sorted({line["device_kind"] for line in lines})
  dates = sorted({line["time"][:10] for line in lines})
  out = ["# GPU check", "",
         f"Written by `benchmarks/gpu_check.py --report` from the JSONL of "
         f"`scripts/gpu_check.sh` ({', '.join(dates) or 'no date'}); device kinds measured: "
         f"{', '.join(kinds) or 'none'}."
         + (" CPU DRY RUN at toy sizes: no figure here is a GPU measurement." if dry else ""),
         "", "Every figure names the device that measured it; a row with no measurement says "
         "\"not measured\". Timings: warm up, then N back-to-back iterations with one block at "
         "the end (\"synced per call\" blocks after each call). Random bf16 weights of the "
         "published shapes, drawn on the device.", ""]
  for group, labels in gpu_check.plan(dry).items():
    out += [f"## {_TITLES[group]}", "", "| measurement | device | figures |", "|---|---|---|"]
    mine = [line for line in lines if line["group"] == group]
    by_label: dict[str, list[dict]] = {}
    for line in mine:
      by_label.setdefault(line["label"], []).append(line)
    extra_labels = [label for label in by_label if label not in labels]
    for label in [*labels, *extra_labels]:
      found = by_label.get(label)
      if not found:
        out.append(f"| {label} | - | not measured |")
        continue
      for line in found:
        out.append(f"| {label} | {line['device_kind']} | "
                   f"{_figures(line)}{_extra(group, line, lines)} |")
    notes = sorted({line["config"].get("note", "") for line in mine} - {""})
    out += [""] + [f"Note: {note}." for note in notes] + ([""] if notes else [])
  return "\n".join(out) + "\n"


def table_rows(lines: list[dict], kind: str) -> list[tuple]:
  """(op, size, kernel_ms, reference_ms) of the dispatch lines measured on `kind`."""
  rows = []
  for line in lines:
    if line["group"] != "dispatch" or line["device_kind"] != kind or "skipped" in line:
      continue
    c, f = line["config"], line["figures"]
    if "kernel_ms" in f:
      rows.append((c["op"], c.get("rows", c.get("lanes")), f["kernel_ms"], f["reference_ms"]))
  return rows


def main(jsonl: Path, out: Path | None, table: Path | None) -> int:
  """Writes the report (and, for lines measured on an accelerator, the dispatch table)."""
  from _gpu_check_groups import read_lines
  from infernix_jax.pallas import dispatch
  lines = read_lines(jsonl)
  if not lines:
    sys.exit(f"{jsonl}: no measurements to report (run scripts/gpu_check.sh first)")
  dry = any(line.get("dry_run") for line in lines)
  if dry and (out is None or table is None):
    sys.exit(f"{jsonl} holds CPU dry-run lines: give --out and --table (temporary files); "
             f"the dry run never writes {REPORT.relative_to(ROOT)} or the shipped table")
  out = out or REPORT
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(render(lines))
  print(f"wrote {out}")
  table = table or dispatch.TABLE_PATH
  for kind in sorted({line["device_kind"] for line in lines}):
    rows = table_rows(lines, kind)
    platforms = {line["platform"] for line in lines if line["device_kind"] == kind}
    if not rows or (platforms == {"cpu"} and not dry):
      continue
    date = min(line["time"][:10] for line in lines if line["device_kind"] == kind)
    source = (f"{out.name} (benchmarks/gpu_check.py group dispatch on {kind}, {date}): each "
              f"kernel against its jnp reference in the same process, bf16 logits"
              + ("; CPU dry run at toy sizes" if dry else ""))
    entry = dispatch.write_table(table, kind, rows, source)
    print(f"{table}: {kind}: " + ", ".join(f"{op} kernel at {spec['kernel_sizes']}"
                                           for op, spec in entry["ops"].items()))
  return 0
