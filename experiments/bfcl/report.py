"""Markdown table of an experiments/bfcl/run.py result file (for docs/results/tools.md).

  .venv/bin/python experiments/bfcl/report.py [experiments/bfcl/results.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
  path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("results.json"))
  r = json.loads(path.read_text())
  t = r["totals"]
  print(f"K = {r['k']}, wall {r['seconds'] / 60:.1f} min, failures recorded: "
        f"{len(r['failures'])}\n")
  print("| subset | cases | tools (non-strict) | prepare errors | compile s/case |")
  print("|---|---:|---:|---:|---:|")
  for key, v in sorted(t.items()):
    if "/" not in key:
      print(f"| {key} | {v['cases']} | {v['tools']} ({v['nonstrict_tools']}) | "
            f"{v.get('prepare_errors', 0)} | {v.get('compile_s', 0) / max(v['cases'], 1):.2f} |")
  print("\n| subset / drafter | terminated | calls (gold) | strict calls | strict valid | "
        "valid % | drafts accepted | tokens | ms/token | errors |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for key, v in sorted(t.items()):
    if "/" in key:
      sc = v.get("strict_calls", 0)
      rate = 100 * v.get("strict_valid", 0) / sc if sc else float("nan")
      acc = f"{v.get('accepted', 0)}/{v.get('drafted', 0)}"
      ms = 1000 * v.get("walk_s", 0) / max(v.get("tokens", 1), 1)
      print(f"| {key} | {v.get('terminated', 0)} | {v.get('calls', 0)} ({v.get('gold_calls', 0)})"
            f" | {sc} | {v.get('strict_valid', 0)} | {rate:.1f} | {acc} | {v.get('tokens', 0)} | "
            f"{ms:.2f} | {v.get('errors', 0)} |")


if __name__ == "__main__":
  main()
