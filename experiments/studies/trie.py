"""The trie paper's compile and per-step study ("Trie Automata for Constrained Decoding over
Large Finite Sets", arXiv:2608.12574, section 5 and appendices C, G, H, M) on this runner.

Peers: XGrammar (regex union, JSON enum, the project's GBNF choice) and LLGuidance, in the
same process on the same vocabulary. One cell = one section of the study:

  equivalence   Proposition 1: the trie's masks equal XGrammar's over random walks, on every
                study vocabulary
  dispatch      warm compile CPU time of trie vs XGrammar choice at small K (the auto
                threshold)
  main          compile (cold, warm, CPU), memory, per-step and batch mask costs over the
                synthetic tool-name K sweep (Qwen3 vocabulary)
  extra         ICD-10-CM billable codes and the shared label sets
  gen           other tokenizer families at the generalization K values

The measurement code is `experiments/trie_repro/measure.py`; the tables and plots are
`experiments/trie_repro/report.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

SECTIONS = ("equivalence", "dispatch", "main", "extra", "gen")
ROOT = Path(__file__).resolve().parents[2]


def units(c) -> int:
  return 1


def run_cell(c, ctx) -> Iterator[dict]:
  from experiments.trie_repro import enum_sets, measure, vocabs

  if c.section not in SECTIONS:
    raise ValueError(f"section={c.section!r}: known {', '.join(SECTIONS)}")
  data = (ROOT / c.data_dir).resolve()
  out: list[dict] = []

  def rec(**fields):
    out.append({"kind": "measurement", **fields})

  rng = np.random.default_rng(c.seed)
  vocab = ctx.get("vocab", c.main_vocab, lambda: vocabs.load(c.main_vocab, data))
  if c.section == "equivalence":
    measure.equivalence(c, rec, data)
  elif c.section == "dispatch":
    measure.dispatch_sweep(c, rec, vocab)
  elif c.section == "main":
    for k in c.k_values:
      values = enum_sets.tool_names(int(k), seed=c.seed)
      measure.measure_set(c, rec, c.main_vocab, vocab, "tools", values, c.engines,
                          batch=int(k) in tuple(c.batch_k), rng=rng)
  elif c.section == "extra":
    for extra in c.extra_sets:
      sets = {"icd10cm": enum_sets.icd10cm_billable()} if extra == "icd10cm" else (
          enum_sets.label_sets(data))
      for name, values in sets.items():
        measure.measure_set(c, rec, c.main_vocab, vocab, name, values,
                            ("trie", f"xgrammar-{c.xgr_step_variant}", "llguidance"), rng=rng)
  else:
    for vname in c.gen_vocabs:
      gv = vocab if vname == c.main_vocab else vocabs.load(vname, data)
      for k in c.gen_k:
        values = enum_sets.tool_names(int(k), seed=c.seed)
        measure.measure_set(c, rec, vname, gv, "tools-gen", values,
                            ("trie", f"xgrammar-{c.xgr_step_variant}"), rng=rng)
  yield from out


def summarize(records, c, out: Path) -> str:
  from experiments.trie_repro import report

  d = {}
  for r in records:
    if r.get("kind") == "measurement":
      d[(r["vocab"], r["set"], r["k"], r["engine"], r["metric"])] = r["value"]
  if not d:
    return "No measurements."
  names = report.plots(d, out, main=c.main_vocab)
  return "\n".join(report.method_lines() + [""] + [f"![{n}]({n})" for n in names] + [""]
                   + report.tables(d, main=c.main_vocab))
