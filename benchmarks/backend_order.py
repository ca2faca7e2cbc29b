"""Benchmark: which exact backend is fastest per constraint kind (the order ``auto`` follows).

  python benchmarks/backend_order.py [--per-subset 12] [--tokens 160] [--write]

Per item (JSONSchemaBench schemas sampled from the four shared subsets, the shared GBNF
grammars, practical regexes, label sets below the trie's threshold), every registered
backend that compiles the item strictly is measured on the Qwen3 vocabulary:

  * compile: a cold compile on a new `ConstraintCompiler` (validation + build);
  * per mask: one random walk, recorded once on the first backend that compiles the item, is
    replayed through every backend's session; each step times `session.fill_mask` of the
    committed state plus `session.accept` of the walk's token (one mask computation per
    token, its advance included), as MaskBench times masks;
  * legal sets: every step's mask is compared bit for bit across the backends (where they
    differ, greedy decoding could commit different tokens).

The speed table compares backends on the items that all of them compile. Per kind the order
is by mean time per mask (what a decode round pays), then compile time; `--write` stores it
in ``infernix_jax/constrain/backends/auto_order.json`` (read by `backends.resolve`) and
the tables in ``docs/results/backend_order.md``. Items and walks are seeded.
Not a study config: it writes the library's routing table, which studies only read.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infernix_jax import constrain as ic  # noqa: E402
from infernix_jax import mask_layout  # noqa: E402
from infernix_jax.constrain import backends  # noqa: E402
from infernix_jax.testing import schema_bench as sb  # noqa: E402
from infernix_jax.testing.random_walk import load_vocab, random_walk  # noqa: E402

DATA = ROOT / "../shared/data"
SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K")
ORDER_FILE = ROOT / "infernix_jax/constrain/backends/auto_order.json"
REPORT = ROOT / "docs/results/backend_order.md"
REGEXES = (r"[0-9]{3}-[0-9]{3}-[0-9]{4}", r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z",
           r"[a-z][a-z0-9._]{2,20}@[a-z]{2,12}\.(com|org|net)",
           r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
           r"(yes|no|maybe), because [a-z ]{10,60}\.", r"[A-Z][a-z]+( [A-Z][a-z]+){0,3}",
           r"\$[1-9][0-9]{0,5}\.[0-9]{2}", r"#[0-9a-fA-F]{6}")
# The slow tail: the schemas with xgrammar's slowest masks in the JSONSchemaBench study's
# mask table (docs/results/jsonschemabench), measured whether or not the sample draws them.
SLOW_TAIL = ("Github_easy/o9861.json", "Github_medium/o28201.json",
             "Github_trivial/o48167.json")


def items(per_subset: int, seed: int) -> list[tuple[str, str, ic.OutputConstraint]]:
  """(kind, name, constraint) of every measured item."""
  jsb = DATA / "jsonschemabench"
  if not jsb.is_dir():
    raise SystemExit(f"{jsb} is absent (the shared data folder)")
  files = [f"{s}/{f.name}" for s in SUBSETS for f in sb.sample_files(DATA, s, per_subset, seed)]
  files += [f for f in SLOW_TAIL if f not in files]
  out = [("json_schema", f, ic.OutputConstraint.json_schema(
      (jsb / "data" / f).read_text(encoding="utf-8"))) for f in files]
  for f in sorted((DATA / "gbnf").glob("*.gbnf")):
    out.append(("grammar", f.name, ic.OutputConstraint.grammar(f.read_text(encoding="utf-8"))))
  for i, pattern in enumerate(REGEXES):
    out.append(("regex", f"regex{i}", ic.OutputConstraint.regex(pattern)))
  labels = DATA / "labels"
  sets = {"trec coarse": json.loads((labels / "trec/coarse_labels.json").read_text()),
          "massive intents[:30]": json.loads((labels / "massive/intents.json").read_text())[:30],
          "banking77[:31]": json.loads((labels / "banking77/categories.json").read_text())[:31]}
  for name, values in sets.items():
    out.append(("choice", name, ic.OutputConstraint.choice([str(v) for v in values])))
  return out


def compile_with(vocab, constraint, name):
  """(compiled, seconds) on a cold compiler, or (None, error class) where refused."""
  compiler = ic.ConstraintCompiler(vocab)
  t0 = time.perf_counter()
  try:
    compiled = compiler.compile(constraint, backend=name)
    compiled.new_session()  # the initial state (some backends defer work to it)
  except ic.ConstraintError as e:
    return None, type(e).__name__
  return compiled, time.perf_counter() - t0


def replay(compiled, tokens: list[int], out: np.ndarray) -> tuple[list[float], list[np.ndarray]]:
  """Microseconds per step and each step's mask, replaying ``tokens``."""
  session = compiled.new_session()
  times, masks = [], []
  for t in tokens:
    t0 = time.perf_counter()
    session.fill_mask(out)
    ok = mask_layout.bit(out, t) and session.accept([t]).accepted == 1
    times.append(1e6 * (time.perf_counter() - t0))
    masks.append(out.copy())
    if not ok:
      break
  return times, masks


def _differences(ref: list[np.ndarray], masks: list[np.ndarray], vocab) -> dict:
  """How ``masks`` differ from ``ref`` step by step: differing steps, tokens legal only here
  and only in ``ref`` (summed over steps), and the commonest spellings of each."""
  steps = only_here = only_ref = escapes = 0
  here, there = collections.Counter(), collections.Counter()
  for x, y in zip(ref, masks):
    if np.array_equal(x, y):
      continue
    steps += 1
    a, b = (mask_layout.unpack(m[None], vocab.size)[0] for m in (x, y))
    extra, missing = np.flatnonzero(b & ~a), np.flatnonzero(a & ~b)
    only_here += len(extra)
    only_ref += len(missing)
    escapes += sum(b"\\" in vocab.token_bytes[i] or b"\x7f" in vocab.token_bytes[i]
                   for i in np.concatenate([extra, missing]))
    here.update(repr(vocab.token_bytes[i])[1:] for i in extra[:50])
    there.update(repr(vocab.token_bytes[i])[1:] for i in missing[:50])
  return {"mask_differs": steps, "only_here": only_here, "only_first": only_ref,
          "escapes": int(escapes),
          "only_here_common": here.most_common(6), "only_first_common": there.most_common(6)}


def measure(args) -> dict:
  vocab = load_vocab("qwen3")
  names = [n for n in backends.names() if n != "trie"] + ["trie"]
  out = np.zeros(vocab.mask_words, np.int32)
  rows = []
  for kind, name, constraint in items(args.per_subset, args.seed):
    row = {"kind": kind, "item": name, "backends": {}}
    compiled = {}
    for b in names:
      if b == "trie" and kind != "choice":
        continue
      c, sec = compile_with(vocab, constraint, b)
      if c is None:
        row["backends"][b] = {"refused": sec}
      else:
        compiled[b] = c
        row["backends"][b] = {"compile_s": sec}
    if compiled:
      first = next(iter(compiled.values()))
      rng = np.random.default_rng(args.seed)
      tokens, _ = random_walk(first.new_session(), rng, max_tokens=args.tokens,
                              eos_prob=0.3, jump_prob=0.0)
      ref = None
      for b, c in compiled.items():
        times, masks = replay(c, tokens, out)
        row["backends"][b]["mask_us"] = [round(x, 2) for x in times]
        if ref is None:
          ref = masks
        else:
          row["backends"][b].update(_differences(ref, masks, c.vocab))
    rows.append(row)
    print(json.dumps({k: v for k, v in row.items() if k != "backends"}),
          {b: (round(1e3 * d["compile_s"], 1), round(float(np.mean(d["mask_us"])), 1)
               if d.get("mask_us") else None) if "compile_s" in d else d["refused"]
           for b, d in row["backends"].items()}, flush=True)
  return {"rows": rows, "seed": args.seed, "per_subset": args.per_subset,
          "tokens": args.tokens}


def _merge(counts) -> list:
  total = collections.Counter()
  for c in counts:
    total.update(dict(c))
  return total.most_common(6)


def summarize(result: dict) -> dict:
  """Per kind and backend, over the items every measured backend of the kind compiles."""
  by_kind = collections.defaultdict(list)
  for row in result["rows"]:
    by_kind[row["kind"]].append(row)
  table = {}
  for kind, rows in by_kind.items():
    present = sorted({b for r in rows for b in r["backends"]})
    common = [r for r in rows if all("mask_us" in r["backends"].get(b, {}) for b in present)]
    per = {}
    for b in present:
      xs = np.array([x for r in common for x in r["backends"][b]["mask_us"]] or [np.nan])
      cs = np.array([r["backends"][b]["compile_s"] for r in common] or [np.nan])
      per[b] = {"compiled": sum("compile_s" in r["backends"].get(b, {}) for r in rows),
                "items": len(rows), "common": len(common), "masks": int(xs.size),
                "mean_us": float(np.mean(xs)), "p50_us": float(np.median(xs)),
                "p99_us": float(np.percentile(xs, 99)), "max_us": float(np.max(xs)),
                "compile_ms_median": float(1e3 * np.median(cs)),
                "compile_ms_max": float(1e3 * np.max(cs)),
                "differing_masks": int(sum(r["backends"][b].get("mask_differs", 0)
                                           for r in common)),
                "only_here": int(sum(r["backends"][b].get("only_here", 0) for r in common)),
                "only_first": int(sum(r["backends"][b].get("only_first", 0) for r in common)),
                "escapes": int(sum(r["backends"][b].get("escapes", 0) for r in common)),
                "only_here_common": _merge(r["backends"][b].get("only_here_common", ())
                                           for r in common),
                "only_first_common": _merge(r["backends"][b].get("only_first_common", ())
                                            for r in common)}
    order = sorted(per, key=lambda b: (per[b]["mean_us"], per[b]["compile_ms_median"]))
    table[kind] = {"order": order, "backends": per}
  return table


def write(table: dict, result: dict, argv: list[str]) -> None:
  from importlib import metadata

  when = time.strftime("%Y-%m-%d", time.gmtime())
  order = {k: v["order"] for k, v in table.items()}
  ORDER_FILE.write_text(json.dumps(
      {"written_by": "benchmarks/backend_order.py", "date": when,
       "rule": "per kind, backends by mean time per mask, then median compile time, on the "
               "items all of them compile; a backend that refuses a constraint is skipped",
       "order": order}, indent=2) + "\n")
  lines = [
      "# Constraint backends: the order `auto` follows", "",
      f"Generated by `python benchmarks/{' '.join(['backend_order.py'] + argv)}` on {when} "
      f"({platform.processor() or platform.machine()}, Python {platform.python_version()}, "
      f"xgrammar {metadata.version('xgrammar')}, llguidance {metadata.version('llguidance')}, Qwen3 "
      f"vocabulary). Items: {result['per_subset']} schemas per JSONSchemaBench subset "
      f"({', '.join(SUBSETS)}; seed {result['seed']}) and the slow tail "
      f"({', '.join(f'`{f}`' for f in SLOW_TAIL)}), the shared GBNF grammars, "
      f"{len(REGEXES)} regexes, three label sets below the trie's threshold.", "",
      "Per item, one seeded random walk (at most "
      f"{result['tokens']} tokens) is replayed through each backend's session; a step is "
      "`fill_mask` of the committed state plus `accept` of the next token. Times are over "
      "the items every backend of the kind compiles strictly; compile is cold (a new "
      "compiler, the vocabulary's tables warm). *Differing masks* counts steps whose legal "
      "set differs from xgrammar's bit for bit; the notes under the table say which tokens.",
      "",
      "| kind | backend | compiled / items | common items | masks | mean us | p50 us | p99 us "
      "| max us | compile ms (median) | compile ms (max) | differing masks |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for kind, t in table.items():
    for b in t["order"]:
      s = t["backends"][b]
      lines.append(
          f"| {kind} | {b} | {s['compiled']} / {s['items']} | {s['common']} | {s['masks']} "
          f"| {s['mean_us']:.1f} | {s['p50_us']:.1f} | {s['p99_us']:.1f} | {s['max_us']:.0f} "
          f"| {s['compile_ms_median']:.1f} | {s['compile_ms_max']:.1f} "
          f"| {s['differing_masks']} |")
  notes = []
  for kind, t in table.items():
    for b, st in t["backends"].items():
      if st["differing_masks"]:
        notes.append(
            f"- {kind}, {b}: {st['differing_masks']} of {st['masks']} steps differ from "
            f"xgrammar's legal set; tokens legal only in {b}: {st['only_here']} "
            f"(commonest: {', '.join(f'`{k}`' for k, _ in st['only_here_common']) or 'none'}); "
            f"legal only in xgrammar: {st['only_first']} (commonest: "
            f"{', '.join(f'`{k}`' for k, _ in st['only_first_common']) or 'none'}). "
            f"{100 * st['escapes'] / max(1, st['only_here'] + st['only_first']):.1f}% of "
            "these tokens hold a backslash or DEL: they differ in how a string may be spelled "
            "(escapes), where each backend's own compliance is in "
            "docs/results/jsonschemabench/summary.md.")
  if notes:
    lines += ["", "Where the legal sets differ (summed over steps):", ""] + notes
  lines += ["", "Order `auto` follows (stored in "
            "`infernix_jax/constrain/backends/auto_order.json`; a constraint the first "
            "refuses goes to the next; a choice of at least the trie's threshold of values "
            "goes to the trie first):", ""]
  lines += [f"- {kind}: {' > '.join(t['order'])}" for kind, t in table.items()]
  slow = sorted(((max(r["backends"]["xgrammar"]["mask_us"]), r["item"]) for r in result["rows"]
                 if r["kind"] == "json_schema" and r["backends"].get("xgrammar", {}).get(
                     "mask_us")), reverse=True)[:6]
  if slow:
    lines += ["", "Slowest JSON Schemas for xgrammar (max time of one mask): "
              + ", ".join(f"`{n}` {t / 1e3:.1f} ms" for t, n in slow) + "."]
  REPORT.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--per-subset", type=int, default=12, help="schemas per JSONSchemaBench subset")
  p.add_argument("--tokens", type=int, default=160, help="longest walk per item")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--json", type=Path, help="also write the raw rows here")
  p.add_argument("--write", action="store_true", help="write the order file and the report")
  p.add_argument("--from-json", type=Path, help="summarize the raw rows of an earlier --json "
                 "instead of measuring")
  args = p.parse_args(argv)
  result = json.loads(args.from_json.read_text()) if args.from_json else measure(args)
  table = summarize(result)
  print(json.dumps({k: {"order": v["order"]} for k, v in table.items()}))
  if args.json:
    args.json.write_text(json.dumps(result))
  if args.write:
    write(table, result, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
  main()
