"""docs/results/trees.md from the results of benchmarks/trees.py (goals marked met or missed)."""

from __future__ import annotations

from pathlib import Path


def _row(rows, part, t, config):
  for r in rows:
    if r["part"] == part and r["temperature"] == t and r["config"] == config:
      return r
  return None


def _ratio(a, b, field):
  if a is None or b is None or not b[field]:
    return None
  return a[field] / b[field]


def _fmt(x, suffix="x"):
  return "-" if x is None else f"{x:.2f}{suffix}"


def _goals(rows, temperatures) -> list[str]:
  out = ["| comparison | T | measured | goal | |", "|---|---:|---:|---:|---|"]

  def line(what, t, value, goal, ok):
    mark = "-" if value is None else ("met" if ok else "missed")
    out.append(f"| {what} | {t:g} | {_fmt(value)} | {goal} | {mark} |")

  for t in temperatures:
    for drafter in ("ngram", "suffix", "mtp", "dflash"):
      tree, chain = _row(rows, 1, t, f"{drafter} tree"), _row(rows, 1, t, f"{drafter} chain")
      r = _ratio(tree, chain, "accepted_length")
      line(f"{drafter} tree vs chain, accepted length", t, r, ">= 1.25x",
           r is not None and r >= 1.25)
      r = _ratio(tree, chain, "tokens_per_second")
      line(f"{drafter} tree vs chain, tokens/s", t, r, "> 1x", r is not None and r > 1.0)
    suffix = _row(rows, 2, t, "suffix tree")
    peers = [x for x in (_row(rows, 2, t, "ngram+jump K=4"), _row(rows, 2, t, "ngram+jump K=7"))
             if x is not None]
    for field, goal, want in (("accepted_length", ">= 2x", 2.0),
                              ("tokens_per_second", ">= 1.5x", 1.5)):
      best = max(peers, key=lambda x: x[field]) if peers else None
      r = _ratio(suffix, best, field)
      name = "accepted length" if field == "accepted_length" else "tokens/s"
      line(f"suffix vs n-gram + jump-forward ({best['config'] if best else '-'}, the better), "
           f"{name}", t, r, goal, r is not None and r >= want)
  return out


def _table(rows, part, t) -> list[str]:
  base = _row(rows, part, 0.0, "none")
  out = ["| configuration | accepted length | tok/s | vs ordinary decoding | drafted | accepted "
         "| pruned nodes | tokens | errors |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    if r["part"] != part or r["temperature"] != t:
      continue
    speed = _fmt(_ratio(r, base, "tokens_per_second")) if base else "-"
    out.append(f"| {r['config']} | {r['accepted_length']:.2f} | {r['tokens_per_second']:.1f} | "
               f"{speed} | {r['drafted']} | {r['accepted']} | {r['pruned_nodes']} | "
               f"{r['tokens']} | {r['errors']} |")
  return out


def write_report(results, path: Path) -> None:
  meta, rows = results["meta"], results["rows"]
  temperatures = sorted({r["temperature"] for r in rows})
  lines = [
      "# Draft trees and suffix decoding",
      "",
      f"Written by `benchmarks/trees.py` on {meta['date']}; {meta['machine']}; "
      f"{meta['model']}; one run ({meta['seconds']} s), one lane, every configuration on a "
      f"fresh engine after `warmup()`, constraints compiled beforehand"
      + (" (**--quick: a smoke run, not a measurement**)" if meta.get("quick") else "") + ".",
      "",
      f"- Part 1: trees vs chains of the same drafter (n-gram; suffix; the trained MTP head, "
      f"whose tree runs the head on each node; the trained block drafter dflash, its tree "
      f"over its K per-position distributions) at an equal verify budget: a chain of "
      f"K = {meta['k']} drafts or a tree of {meta['k']} nodes (both verify {meta['k'] + 1} "
      f"positions with the anchor), with jump-forward, on {meta['prompts']} JSON Schema and "
      f"tool-call validation prompts of the distillation mix, JSON-constrained, "
      f"{meta['max_tokens']} tokens at most.",
      f"- Part 2: the suffix workload: {len(meta['schemas'])} JSONSchemaBench Github_easy "
      f"schemas ({', '.join(s.split('/')[-1] for s in meta['schemas'])}), "
      f"{meta['documents']} documents per schema asked one after another (\"write record i "
      f"of {meta['documents']} about <topic>\"), so later documents see the earlier outputs "
      f"of their schema; suffix decoding (its tree of {meta['k']} nodes) against n-gram + "
      f"jump-forward chains.",
      "- accepted length = (accepted drafts + rounds) / rounds (each round's correction or "
      "bonus counted); tok/s = output tokens / measured wall time.",
      "",
      "## Goals",
      "",
      *_goals(rows, temperatures),
  ]
  for t in temperatures:
    lines += ["", f"## Part 1: trees vs chains, T = {t:g}", "", *_table(rows, 1, t)]
    lines += ["", f"## Part 2: the suffix workload, T = {t:g}", "", *_table(rows, 2, t)]
  lines += [
      "",
      "## How to read it",
      "",
      "- A tree spends the verify budget on siblings where the draft is unsure: the n-gram "
      "tree merges the continuations of every earlier match of the context's suffix "
      "(most travelled first), the suffix tree grows best first by empirical path "
      "probability. Where one continuation dominates, the tree and the chain coincide.",
      "- Host trees (n-gram, suffix) list twice their budget of candidates best first "
      "(`overdraft=2`); the grammar prunes the illegal ones (the pruned-nodes column) and "
      "the 7 best legal nodes are verified, so pruning costs a host walk but no verified "
      "position. The network drafters' trees (no overdraft) are pruned inside their budget: "
      "the drafted column counts the nodes verified.",
      "- Greedy outputs are identical across configurations (the exactness tests guard "
      "it); at T = 0.7 each configuration samples the same law with different draws.",
      "",
  ]
  path.write_text("\n".join(lines))
