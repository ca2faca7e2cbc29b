"""Classification under μ* vs the local law: greedy trie-constrained answers of the same
prompts decoded with sampling_law="local" (each token the argmax of the target renormalized
over the legal tokens) and "exact-finite" (the label whose probability under the target,
summed over every tokenization, is largest: the label-level argmax).

The prompts, subsets and engine are the classification study's (the trie paper's
single-pass template, trie backend, jump-forward drafts); every item runs under both laws in
the same cell, so disagreement is counted item by item. Exact-finite's cost is the
best-first search that certifies the argmax (`faithful.search`), reported per request beside
the local request's wall time.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Iterator

from experiments import workloads
from experiments.runner import plots, stats
from experiments.studies.classification import _chunk, _engine, match
from experiments.studies.decode import _target
from experiments.studies.trie import PAPER as TRIE_PAPER

LAWS = ("local", "exact-finite")


def units(c) -> int:
  return len(_chunk(list(range(c.limit)), c))  # one record per item (both laws)


def run_cell(c, ctx) -> Iterator[dict]:
  """One record per item: each law's answer, seconds and XLA compilations (`xla_compiles`,
  `xla_compile_s`); the first record also those of the engine's build and warm-up
  (`warmup_xla_compiles`, `warmup_xla_compile_s`)."""
  from infernix_jax.runtime import GenerationRequest, compile_count
  from infernix_jax.chat_template import frame_prompt

  # The items first: a data set that is absent is reported before an engine is built.
  items = _chunk(workloads.load(f"labels:{c.dataset}", c.limit, seed=c.seed,
                                template=c.template, constrained=True), c)
  with compile_count.counting() as warm:
    target = _target(c, ctx)
    eng = ctx.get("engine", (c.model, c.lanes, c.capacity),
                  lambda: _engine(c, target, laws=True))
  tok = target[0].tokenizer
  labels = items[0].constraint[1]
  for n, item in enumerate(items):
    ids = list(tok.encode(frame_prompt(tok, item.prompt)))
    base = GenerationRequest(ids, max_tokens=c.max_tokens, constraint=item.output_constraint(),
                             backend=c.backend)
    record = {"kind": "request", "item": item.id, "dataset": c.dataset, "gold": item.reference,
              "prompt_tokens": len(ids), **(warm.record("warmup_") if n == 0 else {})}
    for law in LAWS:
      with compile_count.counting() as compiles:
        t0 = time.perf_counter()
        res = eng.generate([dataclasses.replace(base, sampling_law=law, request_id="")])[0]
        seconds = time.perf_counter() - t0
      answer = res.text.strip()
      report = res.constraint
      record[law] = {
          "text": res.text, "error": res.error, "valid": answer in labels,
          "predicted": match(answer, labels), "correct": match(answer, labels) == item.reference,
          "seconds": seconds, "tokens": len(res.token_ids), **compiles.record(),
          "law_seconds": report.law_seconds if report else 0.0,
          "law_forwards": report.law_forwards if report else 0,
          "law_tokens": report.law_tokens if report else 0,
          "law_trie_nodes": report.law_trie_nodes if report else 0,
          "law_stop": report.law_stop if report else ""}
    yield record


def _median_seconds(laws) -> float:
  return statistics.median(x["seconds"] for x in laws)


def law_figures(rs) -> dict:
  """The headline figures of one dataset's item records (each holds both laws' answers),
  each (point, low, high) with a 95% bootstrap interval over items: accuracy % per law, the
  paired exact-finite minus local accuracy in points, the median seconds per request per law
  and their paired ratio (exact-finite / local; an item's two requests drawn together)."""
  pairs = [([r["exact-finite"]], [r["local"]]) for r in rs]
  out = {"gain": stats.paired_difference(
      pairs, lambda xs: 100 * sum(x["correct"] for x in xs) / len(xs)),
         "cost": stats.paired_ratio(pairs, _median_seconds)}
  for law in LAWS:
    hits = sum(r[law]["correct"] for r in rs)
    out[f"{law} accuracy"] = stats.bootstrap_counts([hits, len(rs) - hits],
                                                    lambda k: 100 * k[0] / k.sum())
    out[f"{law} seconds"] = stats.bootstrap([r[law] for r in rs], _median_seconds)
  return out


def headline(records, c) -> str:
  """The index's headline: exact-finite minus local greedy accuracy per dataset and the cost
  ratio, paired over items."""
  by = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "request":
      by[r["dataset"]].append(r)
  out = []
  for d, rs in by.items():
    f = law_figures(rs)
    out.append(f"{d} {stats.fmt(f['gain'], 1)} points at {stats.fmt(f['cost'], 1)}x the "
               "seconds")
  return ("exact-finite minus local greedy accuracy (paired over items): " + "; ".join(out)
          if out else "")


def summarize(records, c, out: Path) -> str:
  reqs = [r for r in records if r.get("kind") == "request"]
  by = collections.defaultdict(list)
  for r in reqs:
    by[r["dataset"]].append(r)
  rows, acc = [], {"local greedy": [], "exact-finite greedy": []}
  bounds = {k: [] for k in acc}
  for d, rs in by.items():
    n = len(rs)
    loc = [r["local"] for r in rs]
    fin = [r["exact-finite"] for r in rs]
    f = law_figures(rs)
    differ = sum(a["predicted"] != b["predicted"] for a, b in zip(loc, fin))
    only_fin = sum(b["correct"] and not a["correct"] for a, b in zip(loc, fin))
    only_loc = sum(a["correct"] and not b["correct"] for a, b in zip(loc, fin))
    rows.append([d, str(n), stats.fmt(f["local accuracy"], 1),
                 stats.fmt(f["exact-finite accuracy"], 1), stats.fmt(f["gain"], 1),
                 f"{differ} ({100 * differ / n:.0f}%)", f"{only_fin} / {only_loc}",
                 stats.fmt(f["local seconds"]), stats.fmt(f["exact-finite seconds"]),
                 stats.fmt(f["cost"], 1),
                 f"{statistics.median(x['law_forwards'] for x in fin):.0f}",
                 f"{statistics.median(x['law_tokens'] for x in fin):.0f}",
                 f"{statistics.median(x['law_trie_nodes'] for x in fin):.0f}",
                 f"{sum(x['law_stop'] == 'greedy' for x in fin)} / {n}"])
    for law, key in zip(LAWS, acc):
      acc[key].append(f[f"{law} accuracy"][0])
      bounds[key].append(f[f"{law} accuracy"][1:])
  parts = [
      f"Greedy trie-constrained classification of {TRIE_PAPER}'s datasets (the classification "
      f"study's prompts and subset: the first {c.limit} test examples after a shuffle seeded "
      f"{c.seed}), each item decoded under sampling_law=\"local\" and \"exact-finite\". "
      "Local greedy takes the argmax token by token; exact-finite greedy returns the label "
      "whose probability under the target, summed over every tokenization, is largest, found "
      "by a best-first search over the label trie that stops once that argmax is certain "
      "(so it is exact without the whole trie).", "",
      f"Model: {c.model or 'embedded SmolLM2-135M-Instruct'}; drafter: jump-forward (K = 4); "
      "seconds are wall time per request, one request at a time (exact-finite includes its "
      "search).", "",
      "Intervals: 95% percentile bootstrap over items (2,000 resamples, seed 0). Each item is "
      "decoded under both laws, so the accuracy gain (exact-finite minus local, in points) "
      "and the cost ratio (median s/request exact-finite / local) resample items with both "
      "their answers (paired); s/request columns are medians over items.", "",
      plots.table(["dataset", "examples", "local accuracy %", "exact-finite accuracy %",
                   "gain, points (paired)", "answers differ",
                   "right only under exact / only under local",
                   "s/request local", "s/request exact-finite", "cost ratio (x, paired)",
                   "search forwards", "search tokens", "trie nodes", "certified early"], rows),
      ""]
  if by:
    name = plots.grouped_bars(out / "faithful_classification_accuracy.png", list(by), acc,
                              intervals=bounds,
                              title="Greedy accuracy: local law vs label-level argmax (μ*), "
                                    "95% over items", ylabel="accuracy %")
    parts += [f"![accuracy]({name})", ""]
  parts += ["'certified early': requests whose search stopped before exhausting the trie "
            "(the label-level argmax was certain); the others expanded every prefix.", ""]
  return "\n".join(parts)
