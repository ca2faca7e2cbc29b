"""JSON Schema coverage: JSON-Schema-Test-Suite and JSONSchemaBench, written to docs/results.

For JSONSchemaBench, per subset: schemas our checker accepts (strict), the ConstraintError
classes and keywords of the rest, how many compile with lenient=True (and how many keywords
it drops), how many raw xgrammar would "compile" when given the schema directly (the peer that
relaxes silently), and over the MaskBench instances of the accepted schemas: valid instances
accepted / invalid rejected by the real constrained matcher.

With ``--backend llguidance`` the same corpora go through the llguidance backend
(``constrain/backends/llguidance.py``: llguidance's own JSON Schema compiler): the suite and
MaskBench verdicts, what it refuses (class and construct), what ``lenient=True`` drops, and a
side-by-side table with the xgrammar figures read from the xgrammar report. It writes
``docs/results/schema_coverage_llguidance.md`` by default (the xgrammar report is not rerun).

Usage: .venv/bin/python benchmarks/schema_coverage.py [--backend xgrammar|llguidance]
         [--limit N] [--subsets A,B] [--no-suite] [--out FILE]

The full run takes about 26 minutes on 2 shared cores. Progress goes to stderr: one bar over
the suite's files, then one over the JSONSchemaBench schemas of every subset, with counts and
an ETA (redrawn on a terminal, a line every 10 s in a log); the per-subset rows and the tables
go to stdout. `--limit 2 --subsets Github_trivial --no-suite` is a seconds-long smoke run.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import platform
import sys
import time
from decimal import Decimal
from pathlib import Path

from infernix_jax import constrain as ic
from infernix_jax.constrain import _xgr
from infernix_jax.constrain.schema import check_json_schema
from infernix_jax.progress import Progress
from infernix_jax.testing import schema_suite
from infernix_jax.testing.schema_bench import (EOS, SUBSETS, byte_vocab, keyword_of,
                                               llg_narrowing, llguidance_accepts, walker_for)
from infernix_jax.testing.schema_bench import error_key as _error_key
from infernix_jax.testing.schema_bench import subset_files as _subset_files
from infernix_jax.testing.schema_oracle import SearchBudgetExceeded, Walker

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data"
XGRAMMAR_REPORT = ROOT / "docs/results/schema_coverage.md"
LLGUIDANCE_REPORT = ROOT / "docs/results/schema_coverage_llguidance.md"


def subset_files(subset: str, limit: int | None) -> list[Path]:
  return _subset_files(DATA, subset, limit)


def each(items, bar: Progress | None, **metrics):
  """Yields the items; once the caller's loop body has finished with one (`continue`
  included), `bar` advances by one."""
  for item in items:
    yield item
    if bar is not None:
      bar.advance(**metrics)


def suite_bar(drafts=("draft2020-12", "draft7")) -> Progress:
  root = DATA / "json-schema-test-suite"
  return Progress(sum(len(schema_suite.suite_files(root, d)) for d in drafts),
                  "JSON-Schema-Test-Suite files")


def bench_bar(subsets, limit: int | None) -> Progress:
  return Progress(sum(len(subset_files(s, limit)) for s in subsets), "JSONSchemaBench schemas")


def _llg_accepts(backend, compiled, walker: Walker, value) -> bool:
  return llguidance_accepts(backend, compiled, walker, value)


def bench_subset(subset: str, vocab, limit: int | None, bar: Progress | None = None) -> dict:
  say = bar.write if bar else print
  mask_dir = DATA / "jsonschemabench" / "maskbench" / "data"
  r = collections.Counter()
  keywords: collections.Counter = collections.Counter()
  dropped: collections.Counter = collections.Counter()
  t0 = time.perf_counter()
  for f in each(subset_files(subset, limit), bar, subset=subset):
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
      say(f"  {f.name}: xgrammar rejected our output: {str(e)[:120]}")
      continue
    r["supported"] += 1
    # Draft 4: 1.0 is not an integer, so the oracle must not re-spell it as 1.
    walker = walker_for(text)
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
        say(f"  {f.name}: valid instance rejected: {json.dumps(value, default=str)[:100]}")
      else:
        r["invalid_accepted_unexplained"] += 1
        say(f"  {f.name}: INVALID instance accepted: {json.dumps(value, default=str)[:100]}")
  r["seconds"] = round(time.perf_counter() - t0, 1)
  return {"counts": r, "keywords": keywords, "dropped": dropped}


def suite_table(vocab, bar: Progress | None = None) -> list[str]:
  root = DATA / "json-schema-test-suite"
  compiler = ic.ConstraintCompiler(vocab)
  lines = ["| draft | groups | supported | rejected (class: n) | cases in supported | passed | "
           "narrowed (valid, unspellable) | known xgrammar gap | failures |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
  for draft in ("draft2020-12", "draft7"):
    total = schema_suite.SuiteCounts()
    for path in each(schema_suite.suite_files(root, draft), bar, draft=draft):
      total.add(schema_suite.run_file(path, vocab, EOS, draft7=draft == "draft7",
                                       compiler=compiler))
    rej = ", ".join(f"{k}: {v}" for k, v in sorted(total.rejected.items()))
    lines.append(f"| {draft} | {total.groups} | {total.supported} | {rej} | {total.cases} | "
                 f"{total.passed} | {sum(total.narrowed.values())} | {total.known_gap} | "
                 f"{len(total.failures)} |")
  return lines


# --- llguidance ------------------------------------------------------------------------------


def llg_suite_table(backend, vocab, bar: Progress | None = None) -> list[str]:
  say = bar.write if bar else print
  root = DATA / "json-schema-test-suite"
  lines = ["| draft | groups | supported | rejected (class or construct: n) | cases in supported | "
           "passed | narrowed (valid, unspellable) | invalid accepted | failures |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
  for draft in ("draft2020-12", "draft7"):
    c = collections.Counter()
    rejected: collections.Counter = collections.Counter()
    for path in each(schema_suite.suite_files(root, draft), bar, draft=draft):
      text = path.read_text(encoding="utf-8")
      for g, gx in zip(json.loads(text), json.loads(text, parse_float=Decimal)):
        c["groups"] += 1
        schema = g["schema"]
        if draft == "draft7" and isinstance(schema, dict) and "$schema" not in schema:
          schema = {"$schema": schema_suite.DRAFT7_URI, **schema}
        source = json.dumps(schema)
        try:
          compiled = backend.build(vocab, ic.OutputConstraint.json_schema(source))
        except ic.ConstraintError as e:
          rejected[_error_key(e)] += 1
          continue
        c["supported"] += 1
        walker = Walker(EOS)
        for case in gx["tests"]:
          c["cases"] += 1
          try:
            ok = _llg_accepts(backend, compiled, walker, case["data"])
          except SearchBudgetExceeded:
            c["budget"] += 1
            continue
          except AssertionError as e:
            c["failures"] += 1
            say(f"  {path.name}: {e}")
            continue
          if ok == case["valid"]:
            c["passed"] += 1
          elif case["valid"] and llg_narrowing(case["data"], source, path.name, g["description"],
                                               draft == "draft7"):
            c["narrowed"] += 1
          else:
            c["failures"] += 1
            c["invalid_accepted"] += not case["valid"]
            say(f"  {path.name}: {g['description']}: {case['description']}: "
                  f"{'valid rejected' if case['valid'] else 'INVALID accepted'}")
    rej = ", ".join(f"{k}: {v}" for k, v in rejected.most_common(8))
    rest = sum(rejected.values()) - sum(v for _, v in rejected.most_common(8))
    rej += f", other: {rest}" if rest else ""
    lines.append(f"| {draft} | {c['groups']} | {c['supported']} | {rej} | {c['cases']} | "
                 f"{c['passed']} | {c['narrowed']} | {c['invalid_accepted']} | {c['failures']} |")
    say(lines[-1])
  return lines


def llg_bench_subset(backend, subset: str, vocab, limit: int | None,
                     bar: Progress | None = None) -> dict:
  say = bar.write if bar else print
  mask_dir = DATA / "jsonschemabench" / "maskbench" / "data"
  r = collections.Counter()
  constructs: collections.Counter = collections.Counter()
  dropped: collections.Counter = collections.Counter()
  reasons: collections.Counter = collections.Counter()
  t0 = time.perf_counter()
  for f in each(subset_files(subset, limit), bar, subset=subset):
    text = f.read_text(encoding="utf-8")
    r["schemas"] += 1
    try:
      lenient = backend.build(vocab, ic.OutputConstraint.json_schema(text, lenient=True))
      r["lenient_ok"] += 1
      for _, kw in lenient.dropped:
        dropped[kw] += 1
    except ic.ConstraintError:
      pass
    try:
      compiled = backend.build(vocab, ic.OutputConstraint.json_schema(text))
    except ic.ConstraintError as e:
      r["rejected"] += 1
      constructs[_error_key(e)] += 1
      continue
    r["supported"] += 1
    walker = walker_for(text)
    mb = mask_dir / f"{subset}---{f.name}"
    if not mb.exists():
      continue
    for case in json.loads(mb.read_text(encoding="utf-8"), parse_float=Decimal).get("tests", []):
      value, valid = case["data"], case["valid"]
      try:
        ok = _llg_accepts(backend, compiled, walker, value)
      except SearchBudgetExceeded:
        r["instances_budget"] += 1
        continue
      except AssertionError as e:
        r["replay_failures"] += 1
        say(f"  {f.name}: {e}")
        continue
      r["instances"] += 1
      if ok == valid:
        r["instances_agree"] += 1
      elif valid and (why := llg_narrowing(value, text)):
        r["valid_narrowed"] += 1
        reasons[why] += 1
      elif valid:
        r["valid_rejected_unexplained"] += 1
        say(f"  {f.name}: valid instance rejected: {json.dumps(value, default=str)[:100]}")
      else:
        r["invalid_accepted"] += 1
        say(f"  {f.name}: INVALID instance accepted: {json.dumps(value, default=str)[:100]}")
  r["seconds"] = round(time.perf_counter() - t0, 1)
  return {"counts": r, "constructs": constructs, "dropped": dropped, "reasons": reasons}


def xgrammar_figures(path: Path = XGRAMMAR_REPORT) -> dict[str, dict[str, str]]:
  """Per-subset figures of the xgrammar report's JSONSchemaBench table (as written)."""
  if not path.exists():
    return {}
  out = {}
  for line in path.read_text(encoding="utf-8").splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 13 and cells[0] in SUBSETS:
      out[cells[0]] = {"schemas": cells[1], "supported": cells[2], "lenient": cells[4],
                       "instances": cells[7], "agree": cells[8], "narrowed": cells[9],
                       "unexplained": cells[11]}
  return out


def llguidance_main(args) -> None:
  from infernix_jax.constrain.backends import llguidance as llg_backend

  backend = llg_backend.LLGuidanceBackend()
  vocab = byte_vocab()
  subsets = args.subsets.split(",")
  command = " ".join(["benchmarks/schema_coverage.py"] + sys.argv[1:])
  lines = ["# JSON Schema coverage of the llguidance backend, beside xgrammar's", "",
           f"Generated by `{command}` on {datetime.date.today().isoformat()} "
           f"(llguidance {llg_backend.version()}, Python {platform.python_version()}, "
           f"{platform.machine()}, byte-level vocabulary, `max_whitespace=32`). "
           f"JSONSchemaBench subsets run: {', '.join(subsets)}"
           + (f" (first {args.limit} schemas each)" if args.limit else "") + ".", "",
           "The backend hands the user's schema to llguidance's own JSON Schema compiler (with "
           "`pattern`s rewritten to explicit ECMAScript classes and `\\u` escapes disabled so "
           "that keys have one spelling); xgrammar's figures (from "
           "`docs/results/schema_coverage.md`, not rerun here) go through our exact-subset "
           "checker first. Verdicts as in that report: some serialization of the value "
           "followed by EOS terminates the real matcher, replayed through a session's preview. "
           "A *narrowing* is a valid value the generation language cannot spell (counted "
           "apart, by reason); an accepted invalid instance is a soundness failure. Instances "
           "whose serialization search needs more than 5,000 steps are left out of the "
           "verdicts and counted per subset (\"search budget exceeded\"; xgrammar's report "
           "leaves them out the same way). Lenient drops include what llguidance relaxes by "
           "itself (a `oneOf` it compiles as `anyOf`, recorded at every `oneOf`).", ""]
  if not args.no_suite:
    lines += ["## JSON-Schema-Test-Suite (byte vocabulary, real matcher + session replay)", ""]
    bar = suite_bar()
    lines += llg_suite_table(backend, vocab, bar)
    bar.close()
  xgr = xgrammar_figures()
  lines += ["", "## JSONSchemaBench, llguidance beside xgrammar", "",
            "| subset | schemas | supported: llguidance | supported: xgrammar (strict checker) | "
            "lenient compiles: llguidance | lenient: xgrammar | MaskBench instances: llguidance "
            "| agree | valid narrowed | valid rejected, unexplained | INVALID accepted | "
            "instances: xgrammar | agree | s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  details = []
  bar = bench_bar(subsets, args.limit)
  for subset in subsets:
    res = llg_bench_subset(backend, subset, vocab, args.limit, bar)
    c, x = res["counts"], xgr.get(subset, {})
    lines.append(f"| {subset} | {c['schemas']} | {c['supported']} "
                 f"({100 * c['supported'] / max(c['schemas'], 1):.1f}%) | "
                 f"{x.get('supported', 'n/a')} | {c['lenient_ok']} | {x.get('lenient', 'n/a')} | "
                 f"{c['instances']} | {c['instances_agree']} | {c['valid_narrowed']} | "
                 f"{c['valid_rejected_unexplained']} | {c['invalid_accepted']} | "
                 f"{x.get('instances', 'n/a')} | {x.get('agree', 'n/a')} | {c['seconds']} |")
    top = ", ".join(f"`{k}` {v}" for k, v in res["constructs"].most_common(10))
    drop = ", ".join(f"`{k}` {v}" for k, v in res["dropped"].most_common(8))
    why = ", ".join(f"{k}: {v}" for k, v in res["reasons"].most_common())
    extra = (f" Replay failures: {c['replay_failures']}." if c["replay_failures"] else "") + (
        f" Search budget exceeded: {c['instances_budget']}." if c["instances_budget"] else "")
    details.append(f"- {subset}: refused: {top or 'none'}. Lenient drops: {drop or 'none'}. "
                   f"Narrowings: {why or 'none'}.{extra}")
    bar.write(lines[-1])
  bar.close()
  if args.limit:
    lines += ["", "xgrammar's columns are its full run; with `--limit` the llguidance columns "
              "cover fewer schemas."]
  lines += [""] + details
  text = "\n".join(lines) + "\n"
  print(text)
  out = Path(args.out) if args.out else LLGUIDANCE_REPORT
  out.write_text(text, encoding="utf-8")


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--backend", choices=("xgrammar", "llguidance"), default="xgrammar",
                  help="constraint backend to measure (default xgrammar)")
  ap.add_argument("--limit", type=int, default=None, help="schemas per subset (default all)")
  ap.add_argument("--out", default=None, help="markdown file to write the tables to (llguidance: "
                  "default docs/results/schema_coverage_llguidance.md)")
  ap.add_argument("--subsets", default=",".join(SUBSETS), help="comma-separated subsets")
  ap.add_argument("--no-suite", action="store_true", help="skip the JSON-Schema-Test-Suite")
  args = ap.parse_args()
  if args.backend == "llguidance":
    return llguidance_main(args)
  vocab = byte_vocab()
  lines = ["## JSON-Schema-Test-Suite (byte vocabulary, real matcher + session replay)", ""]
  if not args.no_suite:
    bar = suite_bar()
    lines += suite_table(vocab, bar)
    bar.close()
  lines += ["", "## JSONSchemaBench (per subset)", "",
            "| subset | schemas | supported (strict) | rejected | lenient compiles | raw xgrammar "
            "compiles (silently relaxing peer) | our output rejected by xgrammar | MaskBench "
            "instances | agree | valid narrowed | invalid via known gap | unexplained | s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  details = []
  subsets = args.subsets.split(",")
  bar = bench_bar(subsets, args.limit)
  for subset in subsets:
    res = bench_subset(subset, vocab, args.limit, bar)
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
    bar.write(lines[-1])
  bar.close()
  lines += [""] + details
  text = "\n".join(lines) + "\n"
  print(text)
  if args.out:
    Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
  main()
