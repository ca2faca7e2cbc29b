"""Classification with prompt engineering alone vs trie-constrained answers (the trie paper,
"Trie Automata for Constrained Decoding over Large Finite Sets", arXiv:2608.12574,
Table 6 style): identical prompts (its Appendix C.1 single-pass template), greedy decoding,
the only difference being the choice constraint over the label set (trie backend).

One cell = one dataset, one mode ("pe": free answer fuzzy-matched to a label; "trie": the
answer is a label by construction) and one chunk of the subset (so a long run resumes).
"""

from __future__ import annotations

import collections
import difflib
import re
from pathlib import Path
from typing import Iterator

from experiments import workloads
from experiments.runner import plots, stats
from experiments.studies.trie import PAPER as TRIE_PAPER
from experiments.studies.decode import _target

# The only per-model numbers the reference's text states (its table bodies are not in the
# copy under ../shared/reference): accuracy / validity in %, single-pass unless named.
PAPER = [
    ("Qwen3-1.7B", "banking77", "PE: 4.8 acc, 6.6 valid; +Trie: 24.8 acc, 100 valid"),
    ("Qwen3-8B", "banking77", "PE: 48.8 acc; Think+PE: 37.6 acc"),
    ("Qwen3-8B", "trec", "PE: 36.3 acc; Think+Trie: 63.1 acc"),
    ("Gemma3-12B", "all four", "+Trie matches PE accuracy; PE invalid in 0.2-0.5%"),
]


def units(c) -> int:
  return len(_chunk(list(range(c.limit)), c))


def _chunk(items: list, c) -> list:
  """The `c.chunk`-th of `c.chunks` equal parts of the subset (cells small enough to resume)."""
  size = -(-len(items) // c.chunks)
  return items[c.chunk * size:(c.chunk + 1) * size]


def _normalize(s: str) -> str:
  return re.sub(r"[\s\"'`.,:;!]+", " ", s).strip().lower()


def match(text: str, labels) -> str | None:
  """The label a free answer names: exact, then case/punctuation-insensitive, then the label
  with the highest difflib ratio (>= 0.6) to the answer's first line; None when nothing fits."""
  text = text.strip()
  if text in labels:
    return text
  norm = {_normalize(l): l for l in labels}
  first = text.splitlines()[0] if text else ""
  for cand in (_normalize(text), _normalize(first)):
    if cand in norm:
      return norm[cand]
  best = difflib.get_close_matches(_normalize(first), list(norm), n=1, cutoff=0.6)
  return norm[best[0]] if best else None


def run_cell(c, ctx) -> Iterator[dict]:
  """The cell's requests, and per generate call a measurement of its XLA compilations
  (`xla_compiles`, `xla_compile_s`; the first also those of the engine's build and warm-up,
  `warmup_xla_compiles`, `warmup_xla_compile_s`)."""
  from infernix_jax.runtime import GenerationRequest, compile_count
  from infernix_jax.chat_template import frame_prompt

  trie = c.mode == "trie"
  # The items first: a data set that is absent is reported before an engine is built.
  items = _chunk(workloads.load(f"labels:{c.dataset}", c.limit, seed=c.seed,
                                template=c.template, constrained=trie), c)
  with compile_count.counting() as warm:
    target = _target(c, ctx)
    eng = ctx.get("engine", (c.model, c.lanes, c.capacity), lambda: _engine(c, target))
  tok = target[0].tokenizer
  reqs = []
  for item in items:
    ids = list(tok.encode(frame_prompt(tok, item.prompt)))
    if len(ids) + c.max_tokens + 2 * (eng.k + 1) > c.capacity:
      raise ValueError(f"{item.id}: prompt of {len(ids)} tokens exceeds capacity {c.capacity}")
    constraint = item.output_constraint()
    reqs.append(GenerationRequest(ids, max_tokens=c.max_tokens, constraint=constraint,
                                  backend=c.backend if constraint is not None else None))
  labels = items[0].constraint[1] if trie else workloads.labels(c.dataset)[0]
  for start in range(0, len(reqs), c.batch):
    chunk = list(zip(items[start:start + c.batch], reqs[start:start + c.batch]))
    with compile_count.counting() as timed:
      results = eng.generate([r for _, r in chunk])
    for (item, req), res in zip(chunk, results):
      answer = res.text.strip()
      predicted = match(answer, labels)
      yield {"kind": "request", "item": item.id, "dataset": c.dataset, "mode": c.mode,
             "prompt_tokens": len(req.prompt_ids), "gold": item.reference, "text": res.text,
             "finish_reason": res.finish_reason.value, "error": res.error,
             "valid": answer in labels, "predicted": predicted,
             "correct": predicted == item.reference, "tokens": len(res.token_ids),
             "wall_s": res.wall_seconds,
             "compile_s": res.constraint.compile_seconds if res.constraint else 0.0}
    yield {"kind": "measurement", "requests": len(chunk), **timed.record(),
           **(warm.record("warmup_") if start == 0 else {})}


def _engine(c, loaded, laws: bool = False):
  """The jump-forward engine of a cell, warmed up (`laws`: for other sampling laws too)."""
  from infernix_jax.runtime.build import EngineSpec, build_engine

  target, compiler = loaded
  # Jump-forward drafts only forced label tokens: lossless, and greedy output is unchanged.
  spec = EngineSpec(drafter="jump", drafter_options={"k": 4}, lanes=c.lanes,
                    capacity=c.capacity)
  eng = build_engine(spec, target=target, compiler=compiler).engine
  eng.warmup(laws=laws)
  return eng


def share(rows, field: str) -> tuple[float, float, float]:
  """Percentage of records whose `field` is true, with its 95% bootstrap interval over the
  records (one per example: examples are independent; NaN without records)."""
  if not rows:
    return float("nan"), float("nan"), float("nan")
  hits = sum(bool(r[field]) for r in rows)
  return stats.bootstrap_counts([hits, len(rows) - hits],
                                lambda k: 100 * k[0] / k.sum())


def accuracy_gain(trie_rows, pe_rows) -> tuple[float, float, float]:
  """Trie minus PE accuracy in percentage points over the examples both modes answered, with
  a paired bootstrap interval (each draw takes an example's two answers together)."""
  pairs = stats.paired(trie_rows, pe_rows, "item")
  if not pairs:
    return float("nan"), float("nan"), float("nan")
  return stats.paired_difference(pairs, lambda rs: 100 * sum(r["correct"] for r in rs) / len(rs))


def headline(records, c) -> str:
  """The index's headline: trie-constrained minus prompt-only accuracy per dataset, paired
  over examples."""
  agg = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "request":
      agg[(r["dataset"], r["mode"])].append(r)
  gains = [f"{d} {stats.fmt(accuracy_gain(agg[(d, 'trie')], agg[(d, 'pe')]), 1)}"
           for d in dict.fromkeys(d for d, _ in agg) if agg[(d, "trie")] and agg[(d, "pe")]]
  return ("trie-constrained minus prompt-only accuracy, points (paired over examples): "
          + "; ".join(gains)) if gains else ""


def summarize(records, c, out: Path) -> str:
  reqs = [r for r in records if r.get("kind") == "request"]
  agg = collections.defaultdict(list)
  for r in reqs:
    agg[(r["dataset"], r["mode"])].append(r)
  datasets = list(dict.fromkeys(r["dataset"] for r in reqs))
  rows = []
  acc_series = {"PE (prompt only)": [], "PE + trie": []}
  acc_bounds = {k: [] for k in acc_series}
  for d in datasets:
    row = [d, f"{len(agg[(d, 'pe')])} / {len(agg[(d, 'trie')])}"]
    for mode, key in (("pe", "PE (prompt only)"), ("trie", "PE + trie")):
      rs = agg.get((d, mode), [])
      acc = share(rs, "correct")
      # Trie answers are labels by construction: their validity has no sampling spread.
      val = share(rs, "valid") if mode == "pe" else (
          100 * sum(r["valid"] for r in rs) / max(len(rs), 1), float("nan"), float("nan"))
      row += [stats.fmt(acc, 1) if rs else "-", stats.fmt(val, 1) if rs else "-"]
      acc_series[key].append(acc[0] if rs else 0.0)
      acc_bounds[key].append(acc[1:] if rs else (float("nan"), float("nan")))
    row.append(stats.fmt(accuracy_gain(agg.get((d, "trie"), []), agg.get((d, "pe"), [])), 1))
    rows.append(row)
  parts = [
      f"Reproduces the classification comparison of {TRIE_PAPER} (Table 6 style). "
      "The same prompt (the paper's single-pass template, Appendix C.1, rendered as the "
      "user turn of the model's chat template), greedy decoding; PE answers are fuzzy-matched "
      "to the label set (exact, then case/punctuation-insensitive, then difflib ratio >= 0.6), "
      "trie answers are labels by construction. Subset: the first "
      f"{c.limit} test examples after a shuffle seeded {c.seed} (CLINC150: in-scope tests).", "",
      f"Model: {c.model or 'embedded SmolLM2-135M-Instruct'}.", "",
      "Intervals: 95% percentile bootstrap over examples (2,000 resamples, seed 0; one "
      "request per example and mode). The gain is PE+trie minus PE accuracy over the same "
      "examples, resampled in pairs (an example's two answers drawn together). A share of 0 "
      "or 100% has a bootstrap interval of zero width; for 0 of n the exact one-sided 95% "
      "upper bound is 1 - 0.05^(1/n), about 3/n (1.5% at n = 200).", "",
      plots.table(["dataset", "examples (PE / trie)", "PE accuracy %", "PE validity %",
                   "PE+trie accuracy %", "PE+trie validity %", "gain, points (paired)"],
                  rows), ""]
  if datasets:
    name = plots.grouped_bars(out / "classification_accuracy.png", datasets, acc_series,
                              intervals=acc_bounds,
                              title="Accuracy: prompt only vs trie-constrained (95% over "
                                    "examples)", ylabel="accuracy %")
    parts += [f"![accuracy]({name})", ""]
  parts += ["The paper's numbers for other models (from its text; 5 runs, greedy):", "",
            plots.table(["model", "dataset", "reported"], PAPER, "lll"), ""]
  return "\n".join(parts)
