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

Modules: `measure` (the sections' measurements), `engines` (the trie and its peers behind one
interface), `enum_sets` (the value sets), `vocabs` (the study vocabularies), `equivalence`
(Proposition 1's random walks), `report` (tables and plots; also rebuilds
docs/results/trie.md from the earlier layered runs in docs/results/trie/layered/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from experiments.runner import plots, stats

ROOT = Path(__file__).resolve().parents[3]
# How generated reports name the paper (markdown).
PAPER = "*Trie Automata for Constrained Decoding over Large Finite Sets* (arXiv:2608.12574)"


def units(c) -> int:
  """The section's work items (an engine on a set, a set on a vocabulary, a dispatch K)."""
  from experiments.studies.trie import measure

  return measure.work_items(c, (ROOT / c.data_dir).resolve())


def run_cell(c, ctx) -> Iterator[dict]:
  """The section's measurements, each work item's as soon as it is done, then a progress
  record (counted by the runner's bar, not stored)."""
  from experiments.studies.trie import measure, vocabs

  if c.section not in measure.SECTIONS:
    raise ValueError(f"section={c.section!r}: known {', '.join(measure.SECTIONS)}")
  data = (ROOT / c.data_dir).resolve()
  out: list[dict] = []

  def rec(**fields):
    out.append({"kind": "measurement", **fields})

  vocab = ctx.get("vocab", c.main_vocab, lambda: vocabs.load(c.main_vocab, data))
  for label in measure.run_section(c, rec, data, vocab):
    yield from out
    out.clear()
    yield {"kind": "progress", "item": label}
  yield from out


def headline(records, c) -> str:
  """The index's headline: the warm compile time of the largest main-vocabulary tool set, trie
  vs xgrammar, and the masks' equivalence bound (timings are single aggregates: no interval)."""
  d = {(r["vocab"], r["set"], r["k"], r["engine"], r["metric"]): r["value"]
       for r in records if r.get("kind") == "measurement"}
  sizes = [k for (v, s, k, e, m) in d if v == c.main_vocab and s == "tools"
           and e == "trie" and m == "compile_warm_s"]
  if not sizes:
    return ""
  k = max(sizes)
  trie = d[(c.main_vocab, "tools", k, "trie", "compile_warm_s")]
  peer = d.get((c.main_vocab, "tools", k, "xgrammar-regex", "compile_warm_s"))
  text = f"warm compile of {k:,} tool names ({c.main_vocab}): trie {trie:.3g} s"
  if peer:
    text += f" vs xgrammar {peer:.3g} s ({peer / trie:.0f}x; medians of repeats, no interval)"
  mism = [v for (_, _, _, e, m), v in d.items() if e == "trie-vs-xgrammar" and m == "mismatches"]
  walks = c.get("equivalence_walks", 0)
  if mism and not any(mism) and walks:
    text += (f"; masks equal xgrammar's in every one of {walks * len(mism):,} walks (mismatch "
             f"rate < {100 * stats.zero_count_bound(walks * len(mism)):.3f}%)")
  return text


def summarize(records, c, out: Path) -> str:
  from experiments.studies.trie import report

  d, repeats = {}, {}
  for r in records:
    if r.get("kind") == "measurement":
      key = (r["vocab"], r["set"], r["k"], r["engine"], r["metric"])
      d[key] = r["value"]
      if len(r.get("repeats", ())) > 1:
        repeats[key] = r["repeats"]
  if not d:
    return "No measurements."
  names = report.plots(d, out, main=c.main_vocab)
  return "\n".join(report.method_lines() + [""] + [f"![{n}]({n})" for n in names] + [""]
                   + report.tables(d, main=c.main_vocab) + [""] + intervals(d, c, repeats))


def intervals(d: dict, c, repeats: dict | None = None) -> list[str]:
  """What the study's figures can say about their own uncertainty: warm compile times whose
  records keep each repeat get the median's 95% bootstrap interval over repeats (a table);
  other timings are one aggregate per (vocabulary, set, K, engine, metric); the Proposition 1
  check bounds the chance that a random walk meets a mismatching mask."""
  repeats = repeats or {}
  lines = ["## Intervals", "",
           "Each timing above is one aggregate taken at measurement time (warm compile: the "
           f"median of {c.warm_repeats} repeats, one for a peer above K = 10,000; per step: "
           f"the median over the sampled states of the best of {c.step_passes} passes; batch: "
           f"the median of {c.batch_reps} repetitions; dispatch: the median of "
           f"{c.dispatch_repeats} repeats). "
           + ("Records that keep each warm-compile repeat give the median's 95% bootstrap "
              "interval over repeats below; the others keep only the aggregate. "
              if repeats else "This run's records keep only that aggregate, so no bootstrap "
              "interval can be drawn from it (runs from now on keep each compile repeat). ")
           + "The per-step p99 beside each median shows the spread over states."]
  rows = []
  for key in sorted(repeats, key=lambda k: (k[0] != c.main_vocab, k[0], k[1], k[2], k[3], k[4])):
    vocab, set_name, k, engine, metric = key
    iv = stats.bootstrap(repeats[key], lambda xs: float(np.median(xs)))
    rows.append([vocab, set_name, f"{k:,}", engine, metric, len(repeats[key]),
                 stats.fmt(tuple(1e3 * x for x in iv), 2)])
  if rows:
    lines += ["", plots.table(["vocabulary", "set", "K", "engine", "metric", "repeats",
                               "median ms [95% CI]"], rows, "lllllrr")]
  rows = [v for (_, _, _, engine, metric), v in d.items()
          if engine == "trie-vs-xgrammar" and metric == "mismatches"]
  if rows and all(v == 0 for v in rows):
    walks = c.get("equivalence_walks", 0)
    if walks:
      total = walks * len(rows)
      lines += ["", f"Proposition 1: no mismatching mask in {walks:,} random walks on each of "
                f"{len(rows)} (vocabulary, set) rows, so the chance that a random walk meets "
                f"one is below {100 * stats.zero_count_bound(walks):.2f}% per row and below "
                f"{100 * stats.zero_count_bound(total):.3f}% over all {total:,} walks (exact "
                "one-sided 95% bound for 0 events: 1 - 0.05^(1/n))."]
  return lines
