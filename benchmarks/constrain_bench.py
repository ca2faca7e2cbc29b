"""Benchmark: the constraint layer vs raw xgrammar calls on the same states, same run.

  python benchmarks/constrain_bench.py perf [--per-subset 6] [--json out.json]
  python benchmarks/constrain_bench.py overhead [--write]
  python benchmarks/constrain_bench.py coverage [--vocab bytes|qwen3] [--limit N] [--timeout 20]

perf (Qwen3 vocabulary, JSONSchemaBench schemas): walks are recorded once with the session,
then replayed through both paths at identical states.
  * mask fill: ``session.lookahead([])`` with the committed-mask cache cleared vs
    ``GrammarMatcher.fill_next_token_bitmask`` (p50/p99 per call);
  * decode step (K=0): ours = lookahead([]) + preview([t]) + commit() (the production order:
    preview computes the next mask, lookahead reuses it) vs raw fill + accept_token;
  * lookahead K=4: ``session.lookahead(4 drafts)`` (cache cleared, and as used: cached) vs
    raw fill/accept x4 + fill + rollback(4);
  * batch B = 8, 32, 128 (K=4): ``fill_batch`` (per row; and with the batch matcher for
    position 0) vs the raw per-row loop;
  * compile: cold (new compiler: validation + compile + initial mask check) vs raw
    ``compile_json_schema`` on the same canonical text; warm: our cache hit vs xgrammar's own
    cache hit.
overhead (Qwen3 vocabulary, JSONSchemaBench schemas, states every few tokens of random walks):
  * one mask: ``session.lookahead([])`` and ``session.fill_mask`` (committed-mask cache
    dropped) vs ``GrammarMatcher.fill_next_token_bitmask``, same state, same [1, W] buffer;
  * batch: ``ic.fill_batch`` (the engine's masks step) vs each session's ``lookahead`` in a
    loop, B = 1, 4, 16, K = 0 and 4, position 0 cached (as after a preview) or not;
  medians of interleaved calls; ``--write`` replaces its section of docs/results/constrain.md.
coverage: every schema of each subset: compiled / rejected (by error class) / timed out, two
random walks per compiled schema validated with ``jsonschema``.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import platform
import random
import re
import statistics
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _timing  # noqa: E402  (the benchmarks folder is the script's path)
from infernix_jax import constrain as ic  # noqa: E402
from infernix_jax.constrain import _xgr  # noqa: E402
from infernix_jax.testing.random_walk import load_vocab, random_walk  # noqa: E402

BENCH = ROOT / "../shared/data/jsonschemabench/data"
SUBSETS = ["Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K"]
_HUGE_REPEAT = re.compile(r'"(maxLength|maxItems)"\s*:\s*\d{4,}|\{\d*,?\d{4,}\}')


def pick(subset: str, n: int, seed: int = 0) -> list[Path]:
  files = sorted((BENCH / subset).glob("*.json"))
  random.Random(f"bench-{subset}-{seed}").shuffle(files)
  return [f for f in files if not _HUGE_REPEAT.search(f.read_text(encoding="utf-8"))][:n]


def pct(xs, q) -> float:
  return float(np.percentile(np.asarray(xs) * 1e6, q)) if xs else float("nan")


def row(name, ours, peer, unit="us"):
  """One table line: p50/p99 of ours and the peer (microseconds) and the p50 ratio."""
  o50, o99, p50, p99 = pct(ours, 50), pct(ours, 99), pct(peer, 50), pct(peer, 99)
  print(f"{name:34s} ours p50 {o50:9.1f} p99 {o99:9.1f} | raw p50 {p50:9.1f} p99 {p99:9.1f} {unit}"
        f" | ours/raw p50 {o50 / p50:5.3f}  (n={len(ours)})")
  return {"ours_p50_us": o50, "ours_p99_us": o99, "raw_p50_us": p50, "raw_p99_us": p99,
          "ratio_p50": o50 / p50, "n": len(ours)}


# --- raw xgrammar peers --------------------------------------------------------------------------

def raw_lookahead(m, drafts, buf):
  """The same K-draft lookahead written directly against xgrammar."""
  accepted = 0
  for i in range(len(drafts) + 1):
    m.fill_next_token_bitmask(buf, i)
    if i == len(drafts) or not m.accept_token(int(drafts[i])):
      break
    accepted += 1
    if m.is_terminated():
      break
  if accepted:
    m.rollback(accepted)


def perf(args) -> dict:
  vocab = load_vocab("qwen3")
  xgr = _xgr.xgr
  info = _xgr.tokenizer_info(vocab)
  w = vocab.mask_words
  results: dict = {"vocab": repr(vocab), "xgrammar": _xgr.VERSION}
  rng = np.random.default_rng(0)
  cold_ours, cold_raw, warm_ours, warm_raw = [], [], [], []
  walks = []  # (compiled, tokens)
  for subset in SUBSETS:
    for path in pick(subset, args.per_subset):
      text = path.read_text(encoding="utf-8")
      compiler = ic.ConstraintCompiler(vocab)
      spec = ic.OutputConstraint.json_schema(text)
      t = time.perf_counter()
      try:
        compiled = compiler.compile(spec)
      except ic.ConstraintError:
        continue
      cold_ours.append(time.perf_counter() - t)
      raw_compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=True)
      t = time.perf_counter()
      raw_compiler.compile_json_schema(compiled.compiled_source, any_whitespace=True,
                                       max_whitespace_cnt=32, strict_mode=False)
      cold_raw.append(time.perf_counter() - t)
      for _ in range(20):
        t = time.perf_counter()
        compiler.compile(ic.OutputConstraint.json_schema(text))
        warm_ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        raw_compiler.compile_json_schema(compiled.compiled_source, any_whitespace=True,
                                         max_whitespace_cnt=32, strict_mode=False)
        warm_raw.append(time.perf_counter() - t)
      for _ in range(args.walks):
        ids, terminated = random_walk(compiled.new_session(), rng, max_tokens=200, jump_prob=0.0)
        walks.append((compiled, ids))
  print(f"schemas compiled: {len(cold_ours)}; walks: {len(walks)}; "
        f"tokens: {sum(len(t) for _, t in walks)}; V={vocab.size} W={w}")
  results["compile_cold"] = row("compile cold (ms in us)", cold_ours, cold_raw)
  results["compile_warm"] = row("compile warm (cache hit)", warm_ours, warm_raw)

  # Pass 1, per state: one mask fill and one K=4 lookahead, committed-mask cache cleared.
  fill_ours, fill_raw, la_ours, la_raw = [], [], [], []
  buf = np.zeros((5, w), np.int32)
  for compiled, ids in walks:
    s = compiled.new_session()
    m = xgr.GrammarMatcher(compiled._entry.grammar)
    for i, tok in enumerate(ids):
      drafts = ids[i:i + 4]
      s.set_frontier(None)
      t = time.perf_counter()
      s.lookahead([], out=buf[:1])
      fill_ours.append(time.perf_counter() - t)
      t = time.perf_counter()
      m.fill_next_token_bitmask(buf, 0)
      fill_raw.append(time.perf_counter() - t)
      if len(drafts) == 4:
        s.set_frontier(None)
        t = time.perf_counter()
        s.lookahead(drafts, out=buf)
        la_ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        raw_lookahead(m, drafts, buf)
        la_raw.append(time.perf_counter() - t)
      s.accept([tok])
      m.accept_token(tok)
  results["mask_fill"] = row("mask fill (uncached, per call)", fill_ours, fill_raw)
  results["lookahead_k4"] = row("lookahead K=4 (uncached pos 0)", la_ours, la_raw)

  # Pass 2, production rounds: ours = lookahead(K) + preview(accepted) + commit (preview
  # computes the next committed mask, lookahead reuses it); raw = lookahead + accept_token.
  for k in (0, 4):
    ours, raw = [], []
    for compiled, ids in walks:
      s = compiled.new_session()
      m = xgr.GrammarMatcher(compiled._entry.grammar)
      i = 0
      while i < len(ids):
        drafts = ids[i:i + k]
        produced = ids[i:i + max(k, 1)]  # all drafts accepted (K=0: the sampled token)
        t = time.perf_counter()
        s.lookahead(drafts, out=buf[:len(drafts) + 1])
        s.preview(produced)
        s.commit()
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        raw_lookahead(m, drafts, buf)
        for d in produced:
          m.accept_token(d)
        raw.append(time.perf_counter() - t)
        i += len(produced)
    results[f"round_k{k}"] = row(f"round K={k} (masks + accept)", ours, raw)

  # Batch: B sessions at walk states with 4 drafts each.
  states = [(c, ids[:i], ids[i:i + 4]) for c, ids in walks for i in range(0, len(ids) - 4, 7)]
  prng = random.Random(0)
  for b in (8, 32, 128):
    chosen = [states[prng.randrange(len(states))] for _ in range(b)]
    sessions = []
    raws = []
    for c, hist, _ in chosen:
      s = c.new_session()
      s.accept(hist)
      sessions.append(s)
      m = xgr.GrammarMatcher(c._entry.grammar)
      for t_ in hist:
        m.accept_token(t_)
      raws.append(m)
    drafts = np.asarray([d for _, _, d in chosen], np.int32)
    n = np.full(b, 4)
    out = np.zeros((b, 5, w), np.int32)
    tmp = np.zeros(w, np.int32)
    ours, ours_cached, ours_bt, raw = [], [], [], []
    for _ in range(args.batch_repeats):
      for s in sessions:
        s.set_frontier(None)
      t = time.perf_counter()
      ic.fill_batch(sessions, drafts, n, out)
      ours.append(time.perf_counter() - t)
      for s in sessions:
        s.fill_mask(tmp)  # committed masks cached, as after each round's preview
      t = time.perf_counter()
      ic.fill_batch(sessions, drafts, n, out)
      ours_cached.append(time.perf_counter() - t)
      for s in sessions:
        s.set_frontier(None)
      t = time.perf_counter()
      ic.fill_batch(sessions, drafts, n, out, batch_threads=2)
      ours_bt.append(time.perf_counter() - t)
      flat = out.reshape(-1, w)
      t = time.perf_counter()
      for r, m in enumerate(raws):
        raw_lookahead(m, drafts[r], out[r])
      raw.append(time.perf_counter() - t)
      del flat
    results[f"batch_{b}"] = row(f"fill_batch B={b} K=4 uncached", ours, raw)
    results[f"batch_{b}_cached"] = row(f"fill_batch B={b} K=4 pos 0 cached", ours_cached, raw)
    results[f"batch_{b}_threads2"] = row(f"fill_batch B={b} K=4 batch_threads=2", ours_bt, raw)
  return results


# --- coverage ------------------------------------------------------------------------------------

_VOCAB = None


def _worker_init(vocab_name: str):
  global _VOCAB
  if vocab_name == "bytes":
    _VOCAB = ic.Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"],
                                       eos_ids=[256])
  else:
    _VOCAB = load_vocab(vocab_name)


def _one(path: str, walks: int, seed: int) -> dict:
  import jsonschema

  text = Path(path).read_text(encoding="utf-8")
  compiler = ic.ConstraintCompiler(_VOCAB)
  out = {"compiled": False, "error": None, "walks": 0, "completed": 0, "valid": 0,
         "surrogates": 0, "failures": []}
  try:
    compiled = compiler.compile(ic.OutputConstraint.json_schema(text))
  except ic.ConstraintError as e:
    out["error"] = type(e).__name__
    out["located"] = e.location is not None
    return out
  out["compiled"] = True
  schema = json.loads(text)
  cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
  validator = cls(schema)
  rng = np.random.default_rng(seed)
  for _ in range(walks):
    ids, terminated = random_walk(compiled.new_session(), rng, max_tokens=800)
    out["walks"] += 1
    if not terminated:
      continue
    out["completed"] += 1
    raw = _VOCAB.decode(ids[:-1])
    try:
      raw.decode("utf-8")
    except UnicodeDecodeError:
      out["surrogates"] += 1
    try:
      instance = json.loads(raw.decode("utf-8", errors="surrogatepass"))
      validator.validate(instance)
      out["valid"] += 1
    except Exception as e:  # noqa: BLE001 (recorded as a failure)
      out["failures"].append(f"{Path(path).name}: {type(e).__name__}: {str(e)[:160]}")
  return out


def coverage(args) -> dict:
  ctx = mp.get_context("fork")
  results = {}
  for subset in SUBSETS:
    files = sorted((BENCH / subset).glob("*.json"))
    if args.limit:
      random.Random(f"cov-{subset}").shuffle(files)
      files = files[:args.limit]
    tally = collections.Counter()
    errors = collections.Counter()
    failures = []
    pool = ctx.Pool(1, initializer=_worker_init, initargs=(args.vocab,))
    t0 = time.perf_counter()
    for i, f in enumerate(files):
      job = pool.apply_async(_one, (str(f), args.walks, i))
      try:
        r = job.get(timeout=args.timeout)
      except mp.TimeoutError:
        pool.terminate()
        pool = ctx.Pool(1, initializer=_worker_init, initargs=(args.vocab,))
        tally["timeout"] += 1
        continue
      except Exception as e:  # noqa: BLE001 (a crash outside ConstraintError is a finding)
        tally["crash"] += 1
        failures.append(f"{f.name}: CRASH {type(e).__name__}: {str(e)[:160]}")
        continue
      tally["schemas"] += 1
      if r["compiled"]:
        tally["compiled"] += 1
      else:
        errors[r["error"]] += 1
        tally["rejected"] += 1
        tally["rejected_located"] += int(r.get("located", False))
      for k in ("walks", "completed", "valid", "surrogates"):
        tally[k] += r[k]
      failures += r["failures"]
    pool.terminate()
    n = len(files)
    results[subset] = {"files": n, **tally, "errors": dict(errors), "failures": failures[:10],
                       "seconds": time.perf_counter() - t0}
    c = tally["completed"]
    print(f"{subset:15s} files {n:5d} compiled {tally['compiled']:5d} "
          f"({tally['compiled'] / n:6.1%}) rejected {tally['rejected']:5d} crash {tally['crash']} "
          f"(located {tally['rejected_located']}) timeout>{args.timeout}s {tally['timeout']:3d} | "
          f"walks {tally['walks']} completed {c} valid {tally['valid']} "
          f"({tally['valid'] / max(c, 1):6.1%}) invalid-UTF-8 {tally['surrogates']} | "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    print(f"  errors: {dict(errors)}")
    for line in failures[:5]:
      print(f"  FAIL {line}")
  return results


# --- overhead: one mask through a session vs the raw call; batch vs per-row ------------------

RESULTS = ROOT / "docs/results/constrain.md"
SECTION_BEGIN = "<!-- constrain_bench.py overhead: generated section, begin -->"
SECTION_END = "<!-- constrain_bench.py overhead: generated section, end -->"


def _walk_states(args, vocab) -> list[tuple]:
  """(compiled, history, continuation) at every ``--stride``-th token of the first ``--depth``
  tokens of random walks on JSONSchemaBench schemas (the continuation is the walk's next
  tokens, so they are legal drafts)."""
  rng = np.random.default_rng(0)
  states = []
  for subset in SUBSETS:
    for path in pick(subset, args.per_subset):
      compiler = ic.ConstraintCompiler(vocab)
      try:
        compiled = compiler.compile(ic.OutputConstraint.json_schema(path.read_text("utf-8")))
      except ic.ConstraintError:
        continue
      for _ in range(args.walks):
        ids, _ = random_walk(compiled.new_session(), rng, max_tokens=args.depth + 8,
                             jump_prob=0.0)
        for i in range(0, min(args.depth, len(ids)), args.stride):
          states.append((compiled, ids[:i], ids[i:]))
  return states


def _median_us(xs) -> float:
  return statistics.median(xs) * 1e6


def _timed(fn, *a) -> float:
  t = time.perf_counter()
  fn(*a)
  return time.perf_counter() - t


def _single_mask(states, reps: int, w: int) -> list[tuple]:
  """Per state, interleaved: raw ``fill_next_token_bitmask`` vs ``lookahead([])`` vs
  ``fill_mask``, all into the same [1, W] buffer, the committed-mask cache dropped first."""
  buf = np.zeros((1, w), np.int32)
  row = buf[0]
  per_state = []
  for compiled, hist, _ in states:
    s = compiled.new_session()
    s.accept(hist)
    if s.terminated:
      continue
    m = _xgr.new_matcher(compiled._entry.grammar)  # a plain xgrammar GrammarMatcher
    for t in hist:
      m.accept_token(t)
    raw, la, fm = [], [], []

    def ours_lookahead():
      s.set_frontier(None)
      la.append(_timed(s.lookahead, (), buf))

    def ours_fill_mask():
      s.set_frontier(None)
      fm.append(_timed(s.fill_mask, row))

    sides = [lambda: raw.append(_timed(m.fill_next_token_bitmask, buf, 0)), ours_lookahead,
             ours_fill_mask]
    for r in range(reps):
      for j in range(3):
        sides[(r + j) % 3]()
    per_state.append((raw, la, fm))
  return per_state


def _batch_vs_rows(states, reps: int, sets: int, w: int, seed: int = 0) -> list[dict]:
  """``ic.fill_batch`` (the engine's masks step) vs each session's ``lookahead`` in a loop, on
  the same B sessions, drafts and buffer, interleaved call by call."""
  prng = random.Random(seed)
  out_rows = []
  for k, cached in ((0, False), (0, True), (4, True), (4, False)):
    pool = [st for st in states if len(st[2]) >= k]
    for b in (1, 4, 16):
      batch_t, rows_t, ratios = [], [], []
      for _ in range(sets):
        chosen = [pool[prng.randrange(len(pool))] for _ in range(b)]
        sessions = []
        for compiled, hist, _ in chosen:
          s = compiled.new_session()
          s.accept(hist)
          sessions.append(s)
        drafts = np.asarray([cont[:k] for _, _, cont in chosen], np.int32).reshape(b, k)
        n = np.full(b, k, np.int32)
        out = np.zeros((b, k + 1, w), np.int32)
        tmp = np.zeros(w, np.int32)

        def prepare():
          for s in sessions:
            if cached:
              s.fill_mask(tmp)  # the committed mask cached, as after a preview
            else:
              s.set_frontier(None)

        def rows():
          for r, s in enumerate(sessions):
            s.lookahead(drafts[r], out[r])

        bt, rt = [], []
        for r in range(reps):
          for side in ((0, 1) if r % 2 else (1, 0)):
            prepare()
            if side:
              bt.append(_timed(ic.fill_batch, sessions, drafts, n, out))
            else:
              rt.append(_timed(rows))
        batch_t += bt
        rows_t += rt
        ratios.append(statistics.median(bt) / statistics.median(rt))
      out_rows.append({"k": k, "cached": cached, "b": b, "batch_us": _median_us(batch_t),
                       "rows_us": _median_us(rows_t), "ratio": statistics.median(ratios)})
  return out_rows


def overhead(args) -> dict:
  vocab = load_vocab("qwen3")
  w = vocab.mask_words
  load0 = os.getloadavg()[0]
  states = _walk_states(args, vocab)
  print(f"{len(states)} walk states; V={vocab.size} W={w}", flush=True)
  per_state = _single_mask(states, args.reps, w)
  raw_all = [x for raw, _, _ in per_state for x in raw]
  single = []
  for name, j in (("lookahead([])", 1), ("fill_mask", 2)):
    ours_all = [x for st in per_state for x in st[j]]
    ratio = statistics.median(statistics.median(st[j]) / statistics.median(st[0])
                              for st in per_state)
    single.append({"name": name, "ours_us": _median_us(ours_all), "raw_us": _median_us(raw_all),
                   "ratio_p50s": _median_us(ours_all) / _median_us(raw_all),
                   "ratio_per_state": ratio})
    print(f"one mask, {name:14s} ours {single[-1]['ours_us']:7.2f} us | raw "
          f"{single[-1]['raw_us']:7.2f} us | ratio of p50s {single[-1]['ratio_p50s']:.3f} | "
          f"median per-state ratio {ratio:.3f}", flush=True)
  batch = _batch_vs_rows(states, args.batch_reps, args.sets, w)
  for r in batch:
    print(f"fill_batch K={r['k']} pos0 {'cached  ' if r['cached'] else 'uncached'} B={r['b']:2d} "
          f"batch {r['batch_us']:9.2f} us | per-row {r['rows_us']:9.2f} us | "
          f"median per-set ratio {r['ratio']:.3f}", flush=True)
  load1 = os.getloadavg()[0]
  res = {"states": len(per_state), "single": single, "batch": batch, "load": [load0, load1]}
  if args.write:
    _write_section(args, vocab, res)
  return res


def _write_section(args, vocab, res) -> None:
  """Replaces this command's section of docs/results/constrain.md (appends it the first time)."""
  cmd = (f"python benchmarks/constrain_bench.py overhead --per-subset {args.per_subset} "
         f"--walks {args.walks} --depth {args.depth} --stride {args.stride} --reps {args.reps} "
         f"--sets {args.sets} --batch-reps {args.batch_reps} --write")
  para = [
      f"Generated by `{cmd}`. Machine: {_timing.machine()}, load average "
      f"{res['load'][0]:.1f} at the start and {res['load'][1]:.1f} at the end; Python {platform.python_version()}, numpy "
      f"{np.__version__}, xgrammar {_xgr.VERSION}; Qwen3 vocabulary (V = {vocab.size:,}, "
      f"W = {vocab.mask_words:,}).",
      f"States: {res['states']} committed states, one every {args.stride} tokens over the first "
      f"{args.depth} tokens of {args.walks} random walks per JSONSchemaBench schema "
      f"({args.per_subset} sampled per subset of {', '.join(SUBSETS)}). One mask: per state, "
      f"{args.reps} repetitions of each side, interleaved call by call in rotating order, into "
      "the same C-contiguous [1, W] buffer; the session's committed-mask cache is dropped before "
      "each session call (outside the timing), so every call is one real fill. Batch: "
      f"{args.sets} random sets of B states per row, {args.batch_reps} interleaved repetitions "
      "each, the same sessions, drafts (the walk's next K tokens, all legal) and [B, K+1, W] "
      "buffer on both sides. Paired ratio: the median, over states (one mask) or row sets "
      "(batch), of ours/peer medians taken on the same state or set; the goals are read on it.",
  ]
  lines = [SECTION_BEGIN,
           "## One mask and batch fill: overhead on identical states (`constrain_bench.py "
           "overhead`)", ""]
  for text in para:
    lines += textwrap.wrap(text, 95, break_on_hyphens=False) + [""]
  lines += [
      "| measurement | ours p50 (us) | peer p50 (us) | ratio of the p50s | median paired ratio"
      " | goal (paired ratio) |",
      "|---|---|---|---|---|---|",
  ]
  met = []
  for r in res["single"]:
    ok = r["ratio_per_state"] <= 1.10
    met.append(ok)
    lines.append(f"| one mask: session `{r['name']}` vs raw `fill_next_token_bitmask` | "
                 f"{r['ours_us']:.2f} | {r['raw_us']:.2f} | {r['ratio_p50s']:.3f} | "
                 f"{r['ratio_per_state']:.3f} (per state) | "
                 f"<= 1.10: {'met' if ok else 'NOT met'} |")
  for r in res["batch"]:
    ok = r["ratio"] <= 1.00
    met.append(ok)
    pos0 = "cached (after a preview)" if r["cached"] else "uncached"
    lines.append(f"| `fill_batch` vs per-row `lookahead`, B={r['b']}, K={r['k']}, position 0 "
                 f"{pos0} | {r['batch_us']:.2f} | {r['rows_us']:.2f} | "
                 f"{r['batch_us'] / r['rows_us']:.3f} | {r['ratio']:.3f} (per set) | "
                 f"<= 1.00: {'met' if ok else 'NOT met'} |")
  lines += ["", f"Goals met: {sum(met)} of {len(met)} rows.", "", SECTION_END]
  text = RESULTS.read_text(encoding="utf-8")
  block = "\n".join(lines)
  if SECTION_BEGIN in text and SECTION_END in text:
    head, rest = text.split(SECTION_BEGIN, 1)
    text = head + block + rest.split(SECTION_END, 1)[1]
  else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
  RESULTS.write_text(text, encoding="utf-8")
  print(f"wrote {RESULTS.relative_to(ROOT)}")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = p.add_subparsers(dest="cmd", required=True)
  pp = sub.add_parser("perf")
  pp.add_argument("--per-subset", type=int, default=6)
  pp.add_argument("--walks", type=int, default=2)
  pp.add_argument("--batch-repeats", type=int, default=20)
  pp.add_argument("--json")
  po = sub.add_parser("overhead")
  po.add_argument("--per-subset", type=int, default=3)
  po.add_argument("--walks", type=int, default=2)
  po.add_argument("--depth", type=int, default=40, help="walk tokens the states are taken from")
  po.add_argument("--stride", type=int, default=4)
  po.add_argument("--reps", type=int, default=300, help="one-mask repetitions per state and side")
  po.add_argument("--sets", type=int, default=12, help="random row sets per batch row")
  po.add_argument("--batch-reps", type=int, default=60)
  po.add_argument("--write", action="store_true", help="update docs/results/constrain.md")
  po.add_argument("--json")
  pc = sub.add_parser("coverage")
  pc.add_argument("--vocab", default="bytes", help="bytes | qwen3 | smollm2")
  pc.add_argument("--limit", type=int, default=0, help="schemas per subset (0 = all)")
  pc.add_argument("--walks", type=int, default=2)
  pc.add_argument("--timeout", type=float, default=20.0, help="seconds per schema")
  pc.add_argument("--json")
  args = p.parse_args(argv)
  res = {"perf": perf, "overhead": overhead, "coverage": coverage}[args.cmd](args)
  if args.json:
    Path(args.json).write_text(json.dumps(res, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
