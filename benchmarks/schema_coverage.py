"""JSON Schema coverage: JSON-Schema-Test-Suite and JSONSchemaBench, written to docs/results.

For JSONSchemaBench, per subset: schemas our checker accepts (strict), the ConstraintError
classes and keywords of the rest, how many compile with lenient=True (and how many keywords
it drops), how many raw xgrammar would "compile" when given the schema directly (the peer that
relaxes silently), and over the MaskBench instances of the accepted schemas: valid instances
accepted / invalid rejected by the real constrained matcher.

Usage: .venv/bin/python benchmarks/schema_coverage.py [--limit N] [--out docs/results/schema_coverage.md]
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from decimal import Decimal
from pathlib import Path

from infernix_jax import constrain as ic
from infernix_jax.constrain import _xgr
from infernix_jax.constrain.schema import check_json_schema
from infernix_jax.testing import schema_suite
from infernix_jax.testing.schema_oracle import SearchBudgetExceeded, Walker

DATA = Path(__file__).resolve().parents[1] / "../shared/data"
SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K")
EOS = 256


def byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   eos_ids=[EOS], name="bytes")


def keyword_of(e: ic.ConstraintError) -> str:
  loc = e.location or ""
  if isinstance(e, ic.UnsupportedSchemaError) and loc:
    return loc.rsplit("/", 1)[-1] or "(root)"
  return type(e).__name__


def bench_subset(subset: str, vocab, limit: int | None) -> dict:
  files = sorted((DATA / "jsonschemabench" / "data" / subset).glob("*.json"))[:limit]
  mask_dir = DATA / "jsonschemabench" / "maskbench" / "data"
  r = collections.Counter()
  keywords: collections.Counter = collections.Counter()
  dropped: collections.Counter = collections.Counter()
  t0 = time.perf_counter()
  for f in files:
    text = f.read_text(encoding="utf-8")
    r["schemas"] += 1
    try:
      _xgr.compile_json_schema(vocab, text, max_whitespace=32)
      r["xgrammar_raw_compiles"] += 1
    except Exception:  # noqa: BLE001  (peer measurement: any failure counts as not compiled)
      pass
    try:
      lenient = check_json_schema(text, lenient=True)
      _xgr.compile_json_schema(vocab, lenient.schema_json, max_whitespace=32)
      r["lenient_ok"] += 1
      for _, kw in lenient.dropped:
        dropped[kw] += 1
    except ic.ConstraintError:
      pass
    try:
      check = check_json_schema(text)
    except ic.ConstraintError as e:
      r["rejected"] += 1
      keywords[keyword_of(e)] += 1
      if e.location is None:
        r["rejected_without_location"] += 1
      continue
    try:
      compiled = _xgr.compile_json_schema(vocab, check.schema_json, max_whitespace=32)
    except Exception as e:  # noqa: BLE001  (our output must always compile: count if not)
      r["our_output_failed_xgrammar"] += 1
      print(f"  {f.name}: xgrammar rejected our output: {str(e)[:120]}")
      continue
    r["supported"] += 1
    # Draft 4: 1.0 is not an integer, so the oracle must not re-spell it as 1.
    draft4 = "draft-04" in text[:400] or "draft-03" in text[:400]
    walker = Walker(EOS, budget=5000, integer_floats=not draft4)
    mb = mask_dir / f"{subset}---{f.name}"
    if not mb.exists():
      continue
    for case in json.loads(mb.read_text(encoding="utf-8"), parse_float=Decimal).get("tests", []):
      value, valid = case["data"], case["valid"]
      try:
        ok = walker.accepts(_xgr.new_matcher(compiled), value)
      except SearchBudgetExceeded:
        r["instances_budget"] += 1
        continue
      r["instances"] += 1
      if ok == valid:
        r["instances_agree"] += 1
      elif valid and schema_suite.narrowing_reason(value, check.schema_json):
        r["valid_narrowed"] += 1
      elif not valid and schema_suite.known_gap(value, check.schema_json):
        r["invalid_known_gap"] += 1
      elif valid:
        r["valid_rejected_unexplained"] += 1
        print(f"  {f.name}: valid instance rejected: {json.dumps(value, default=str)[:100]}")
      else:
        r["invalid_accepted_unexplained"] += 1
        print(f"  {f.name}: INVALID instance accepted: {json.dumps(value, default=str)[:100]}")
  r["seconds"] = round(time.perf_counter() - t0, 1)
  return {"counts": r, "keywords": keywords, "dropped": dropped}


def suite_table(vocab) -> list[str]:
  root = DATA / "json-schema-test-suite"
  compiler = ic.ConstraintCompiler(vocab)
  lines = ["| draft | groups | supported | rejected (class: n) | cases in supported | passed | "
           "narrowed (valid, unspellable) | known xgrammar gap | failures |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
  for draft in ("draft2020-12", "draft7"):
    total = schema_suite.SuiteCounts()
    for path in schema_suite.suite_files(root, draft):
      total.add(schema_suite.run_file(path, vocab, EOS, draft7=draft == "draft7",
                                       compiler=compiler))
    rej = ", ".join(f"{k}: {v}" for k, v in sorted(total.rejected.items()))
    lines.append(f"| {draft} | {total.groups} | {total.supported} | {rej} | {total.cases} | "
                 f"{total.passed} | {sum(total.narrowed.values())} | {total.known_gap} | "
                 f"{len(total.failures)} |")
  return lines


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--limit", type=int, default=None, help="schemas per subset (default all)")
  ap.add_argument("--out", default=None, help="markdown file to write the tables to")
  ap.add_argument("--subsets", default=",".join(SUBSETS), help="comma-separated subsets")
  ap.add_argument("--no-suite", action="store_true", help="skip the JSON-Schema-Test-Suite")
  args = ap.parse_args()
  vocab = byte_vocab()
  lines = ["## JSON-Schema-Test-Suite (byte vocabulary, real matcher + session replay)", ""]
  if not args.no_suite:
    lines += suite_table(vocab)
  lines += ["", "## JSONSchemaBench (per subset)", "",
            "| subset | schemas | supported (strict) | rejected | lenient compiles | raw xgrammar "
            "compiles (silently relaxing peer) | our output rejected by xgrammar | MaskBench "
            "instances | agree | valid narrowed | invalid via known gap | unexplained | s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  details = []
  for subset in args.subsets.split(","):
    res = bench_subset(subset, vocab, args.limit)
    c = res["counts"]
    unexplained = c["valid_rejected_unexplained"] + c["invalid_accepted_unexplained"]
    lines.append(f"| {subset} | {c['schemas']} | {c['supported']} "
                 f"({100 * c['supported'] / max(c['schemas'], 1):.1f}%) | {c['rejected']} | "
                 f"{c['lenient_ok']} | {c['xgrammar_raw_compiles']} | "
                 f"{c['our_output_failed_xgrammar']} | {c['instances']} | {c['instances_agree']} "
                 f"| {c['valid_narrowed']} | {c['invalid_known_gap']} | {unexplained} | "
                 f"{c['seconds']} |")
    top = ", ".join(f"`{k}` {v}" for k, v in res["keywords"].most_common(12))
    drop = ", ".join(f"`{k}` {v}" for k, v in res["dropped"].most_common(8))
    details.append(f"- {subset}: rejections by keyword: {top}. Lenient drops: {drop}.")
    print(lines[-1], flush=True)
  lines += [""] + details
  text = "\n".join(lines) + "\n"
  print(text)
  if args.out:
    Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
  main()
