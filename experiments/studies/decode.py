"""Decoding through the engine: accepted length, acceptance per draft position, tokens/s, host
time share and validity of completed outputs, per drafter and workload.

One cell = one engine configuration (drafter, K, jump-forward, masked q, bridge) and one
request-level setting (constraint on/off, backend, temperature) over the config's workloads.
The acceptance study and the engine benchmark are configs of this study.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from experiments import workloads
from experiments.runner import plots, projection, stats
from experiments.studies import decode_traces


def _items(c, batch: int = 0) -> list:
  """`c.per_workload` items of each workload; with `c.split`, items of the drafters' training
  sources (JSON schemas, BFCL questions) come from that split only. Batch b > 0 (a cell grown
  to a target interval width) holds the next `c.per_workload` of the same seeded draw, so
  batches never repeat a prompt; it is empty once a workload runs out."""
  from infernix_jax.train.prompts import split_of

  out = []
  for spec in c.workloads:
    items = workloads.load(spec, 0, seed=c.seed)
    if c.split:
      items = [it for it in items
               if not it.id.startswith(TRAINED_SOURCES) or split_of(it.id) == c.split]
    out += workloads.draw_batch(items, c.per_workload, batch, c.seed)
  return out


TRAINED_SOURCES = ("json/", "tool/")  # ids shared with the distillation prompt mix


def units(c) -> int:
  return max(1, len(c.workloads) * c.per_workload)


def _target(c, ctx):
  """(runtime.build.Target, ConstraintCompiler) of `c.model`, shared by consecutive cells."""
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import compile_cache
  from infernix_jax.train.corpus import load_target

  def load():
    target = load_target(c.model or None)[0]
    return target, ic.ConstraintCompiler(target.vocab)

  compile_cache.enable()
  return ctx.get("model", c.model, load)


JUMP_ALONE = "jump"  # what jump-forward around a drafter that drafts nothing is


def drafter_options(name: str, pool, target=None) -> dict:
  """The entries of `pool` that drafter `name` takes: one options dict serves a grid over
  drafters, each taking its own fields (n-gram's n, the trained drafters' weights ...). A
  draft model left unset drafts with the target itself (`target`, a Target).

  Raises:
    ParameterError("drafter_options.<field>"): a field no registered drafter has.
  """
  from infernix_jax.errors import ParameterError
  from infernix_jax.runtime import drafters

  pool = dict(pool)
  every = {f for n in drafters.names() for f in drafters.fields(n)}
  for key in pool:
    if key not in every:
      raise ParameterError(f"drafter_options.{key}", f"no registered drafter has an option "
                           f"{key!r}; {name!r} takes {', '.join(drafters.fields(name)) or 'none'}")
  own = drafters.fields(name)
  if "model" in own and pool.get("model") is None and target is not None:
    pool["model"] = (target.cfg, target.model)
  return {k: v for k, v in pool.items() if k in own}


def engine_spec(c, target=None):
  """The `EngineSpec` of a cell: `c.drafter` (name, options, jump_forward) and the engine
  fields. Jump-forward around a drafter that drafts nothing ("none") is the jump drafter."""
  from infernix_jax.runtime import drafters
  from infernix_jax.runtime.build import EngineSpec, load_plugins

  load_plugins(tuple(c.get("plugins", ())))
  d = c.drafter
  name, jump = d.name, bool(d.jump_forward)
  if jump and not drafters.entry(name).drafts:
    name = JUMP_ALONE
  return EngineSpec(drafter=name, drafter_options=drafter_options(name, d.options, target),
                    jump_forward=jump, masked_q=c.masked_q, lanes=c.lanes,
                    capacity=c.capacity, bridge=c.bridge,
                    plugins=tuple(c.get("plugins", ())))


def _engine(c, loaded):
  from infernix_jax.runtime.build import build_engine

  target, compiler = loaded
  return build_engine(engine_spec(c, target), target=target, compiler=compiler).engine


def group(c) -> tuple:
  return _engine_key(c)


def _engine_key(c) -> tuple:
  """What a cell's engine is built from: the drafter's own options of the pool (a pool field
  another drafter takes does not make another engine)."""
  from infernix_jax.runtime import drafters

  d = c.drafter
  own = drafters.fields(d.name) if d.name in drafters.names() else d.options
  return (c.model, d.name, d.jump_forward,
          tuple(sorted((k, v) for k, v in d.options.items() if k in own)), c.masked_q,
          c.bridge, c.lanes, c.capacity, tuple(c.get("plugins", ())))


def drafter_record(d) -> dict:
  """A request record's drafter: name, jump_forward and the options of the config."""
  return {"name": d.name, "jump_forward": d.jump_forward, **d.options.to_dict()}


def config_k(d) -> int:
  """K of a config's drafter (its options' k; older configs held k beside the name)."""
  if "options" in d:
    return int(d.options.get("k", 0))
  return int(d.get("k", 0))


def _requests(c, eng, tok, batch: int) -> tuple[list, list, list]:
  """(requests, their items, skip records) of a cell's batch b (seeds continuing)."""
  from infernix_jax.runtime import GenerationRequest, SamplingOptions
  from infernix_jax.chat_template import frame_prompt

  items = _items(c, batch)
  first_seed = c.seed + batch * units(c)
  traced = int(c.get("trace_first", 0)) if batch == 0 else 0  # the first requests' traces
  reqs, kept, skips = [], [], []
  for i, item in enumerate(items):
    ids = list(tok.encode(frame_prompt(tok, item.prompt)))
    budget = c.max_tokens or item.max_tokens
    if len(ids) + budget + 2 * (eng.k + 1) > c.capacity:
      skips.append({"kind": "skip", "item": item.id, "why": f"prompt of {len(ids)} tokens + "
                    f"budget {budget} exceeds capacity {c.capacity}"})
      continue
    constraint = item.output_constraint() if c.constrained else None
    reqs.append(GenerationRequest(
        ids, max_tokens=budget, constraint=constraint,
        backend=None if c.backend == "auto" or constraint is None else c.backend,
        sampling=SamplingOptions(temperature=c.temperature, seed=first_seed + i),
        trace=len(reqs) < traced))
    kept.append(item)
  return reqs, kept, skips


def run_cell(c, ctx, batch: int = 0) -> Iterator[dict]:
  """The cell's requests (batch b: the b-th further batch of prompts, seeds continuing) and
  one measurement of the timed call, with the XLA compilations of the warm-up before it
  (`warmup_xla_compiles`, `warmup_xla_compile_s`: the engine's build and `warmup()` when
  this cell builds it) and of the timed call itself (`xla_compiles`, `xla_compile_s`: 0 when
  the warm-up covered every shape)."""
  from infernix_jax.runtime import GenerationRequest, compile_count

  with compile_count.counting() as warm:
    loaded = _target(c, ctx)
    eng = ctx.get("engine", _engine_key(c), lambda: _engine(c, loaded))
    reqs, kept, skips = _requests(c, eng, loaded[0].tokenizer, batch)
    # every shape of the timed call: its prompts' prefills, and traced requests' trace step
    eng.warmup(prompt_lengths=[len(r.prompt_ids) for r in reqs],
               trace=bool(c.get("trace_first", 0)))
    if reqs:  # a free and a constrained request outside the measured run
      eng.generate([GenerationRequest(reqs[0].prompt_ids, max_tokens=2),
                    GenerationRequest(reqs[0].prompt_ids, max_tokens=2,
                                      constraint=reqs[0].constraint, backend=reqs[0].backend)])
  yield from skips
  if not reqs:
    return
  eng.stats.clear()
  eng.host.stats.clear()
  with compile_count.counting() as timed:
    t0 = time.perf_counter()
    results = eng.generate(reqs)
    wall = time.perf_counter() - t0
  for item, req, res in zip(kept, reqs, results):
    completed = res.finish_reason.value == "stop"
    yield {
        "kind": "request", "item": item.id, "workload": item.workload,
        "model": c.model or "embedded",
        "prompt_tokens": len(req.prompt_ids),
        "constraint": list(item.constraint) if req.constraint is not None else None,
        "sampling": {"temperature": c.temperature, "seed": req.sampling.seed},
        "drafter": drafter_record(c.drafter), "masked_q": c.masked_q, "backend": c.backend,
        "tokens": len(res.token_ids), "text": res.text, "finish_reason": res.finish_reason.value,
        "error": res.error, "rounds": len(res.rounds), "accepted": res.accepted,
        "drafted": res.drafted, "accepted_length": res.accepted_length,
        "per_round": [[r.drafted, r.accepted] for r in res.rounds],
        "jump_forward_tokens": res.constraint.jump_forward_tokens if res.constraint else 0,
        "valid": item.validate(res.text) if completed else None,
        "wall_s": res.wall_seconds}
    if res.trace is not None:
      yield {"kind": "trace", "item": item.id, "trace": res.trace}
  hs, st = eng.host.stats, eng.stats
  rounds = max(st["round_seconds"], 1e-9)
  tokens = sum(len(r.token_ids) for r in results)
  yield {"kind": "measurement", "requests": len(reqs), "tokens": tokens, "wall_s": wall,
         "tokens_per_s": tokens / wall, **timed.record(), **warm.record("warmup_"),
         "rounds": st["rounds"],
         "round_ms": 1e3 * st["round_seconds"] / max(st["rounds"], 1),
         "host_share": (hs["begin_seconds"] + hs["mask_seconds"] + hs["commit_seconds"]) / rounds,
         "host_mask_share": hs["mask_seconds"] / rounds,
         "draft_wait_share": hs["draft_wait_seconds"] / rounds}


def label(ov: dict) -> str:
  """A short name of a cell from its overrides (drafter first)."""
  d = ov.get("drafter.name", "")
  parts = [d + ("+jump" if ov.get("drafter.jump_forward") else "")] if d else []
  for key, name in (("drafter.options.k", "K"), ("drafter.k", "K"), ("temperature", "T"),
                    ("backend", ""), ("bridge", ""), ("lanes", "lanes ")):
    if key in ov:
      parts.append(f"{name}{ov[key]}" if name else str(ov[key]))
  if "drafter.options.tree" in ov:
    parts.append("tree" if ov["drafter.options.tree"] else "chain")
  if ov.get("drafter.options.sampling"):
    parts.append("sampled drafts")
  if "masked_q" in ov:
    parts.append("masked q" if ov["masked_q"] else "plain q")
  if "constrained" in ov:
    parts.append("constrained" if ov["constrained"] else "free")
  return " ".join(parts) or "base"


def accepted_length(rows) -> float:
  """The accepted length (`infernix_jax.runtime.accepted_length`: (accepted drafts + rounds)
  / rounds) over request records, each with its request's "accepted" and "rounds"."""
  from infernix_jax.runtime.types import accepted_length as of_counts

  return of_counts(sum(r["accepted"] for r in rows), sum(r["rounds"] for r in rows))


def interval(records, c) -> tuple[float, float, float]:
  """The target figure of a cell sized by a target width: accepted length with its 95%
  interval over prompts."""
  return _accepted_interval([r for r in records if r.get("kind") == "request"])


def headline(records, c) -> str:
  """The index's headline: the cell with the longest accepted length, with its interval (a
  drafter table's: its winner under the constraint against n-gram + jump-forward, paired)."""
  if c.get("reading", "") == "drafters":
    from experiments.studies import drafter_table

    said = drafter_table.headline(records, c)
    if said:
      return said
  by_cell = collections.defaultdict(list)
  for r in records:
    if r.get("kind") == "request":
      by_cell[r["cell"]].append(r)
  if not by_cell:
    return ""
  ov = {r["cell"]: r.get("overrides", {}) for r in records if r.get("kind") == "cell"}
  best = max(by_cell, key=lambda cell: accepted_length(by_cell[cell]))
  return (f"longest accepted length {stats.fmt(_accepted_interval(by_cell[best]))} tokens per "
          f"round, {label(ov.get(best, {}))} (of {len(by_cell)} cells; 95% over prompts)")


def _accepted_interval(rows) -> tuple[float, float, float]:
  """Accepted length over request records with its 95% bootstrap interval over prompts
  (requests of one prompt are resampled together)."""
  if not rows:
    return float("nan"), float("nan"), float("nan")
  return stats.bootstrap(stats.by_unit(rows, "item"), accepted_length)


MAX_SERIES = 20  # bars per workload / lines per plot that stay readable


def _plotted(cells, ov, by_cell) -> tuple[list, str]:
  """The cells the plots show and a caption: all of them when few; else greedy cells with
  masked q on (the table has every cell)."""
  shown = [c for c in cells if by_cell.get(c)]
  if len(shown) <= MAX_SERIES:
    return shown, ""
  temps = [ov[c]["temperature"] for c in shown if "temperature" in ov[c]]
  low = min(temps) if temps else None
  shown = [c for c in shown if ov[c].get("temperature", low) == low
           and ov[c].get("masked_q", True)]
  return shown[:MAX_SERIES], f" (T = {low}, masked q)" if low is not None else ""


EFFECT_AXES = (("constrained", "constraint on vs off"), ("drafter.jump_forward",
               "jump-forward on vs off"), ("masked_q", "masked q on vs off"))


def _effects(cells, ov, by_cell) -> list:
  """One row per boolean grid axis: the ratio of accepted lengths over cell pairs that differ
  in that axis only."""
  rows = []
  for axis, name in EFFECT_AXES:
    ratios, pairs = [], []
    index = {tuple(sorted((k, str(v)) for k, v in ov[c].items() if k != axis)): c
             for c in cells if ov[c].get(axis) is False and by_cell.get(c)}
    for c in cells:
      if ov[c].get(axis) is True and by_cell.get(c):
        other = index.get(tuple(sorted((k, str(v)) for k, v in ov[c].items() if k != axis)))
        if other:
          ratios.append((accepted_length(by_cell[c]) / accepted_length(by_cell[other]),
                         label({k: v for k, v in ov[c].items() if k != axis})))
          off = {u[0]["item"]: u for u in stats.by_unit(by_cell[other], "item")}
          pairs += [(u, off[u[0]["item"]]) for u in stats.by_unit(by_cell[c], "item")
                    if u[0]["item"] in off]  # same prompt (and seed) on both sides
    if ratios:
      vals = sorted(r for r, _ in ratios)
      best = max(ratios)
      pooled = stats.fmt(stats.paired_ratio(pairs, accepted_length)) if pairs else "-"
      rows.append([name, len(ratios), f"{float(np.median(vals)):.2f}",
                   f"{vals[0]:.2f} - {vals[-1]:.2f}", pooled, best[1]])
  return rows


LEARNED = ("mtp", "eagle3", "dflash", "dflash2", "dspark", "draft")  # drafters with networks


def _reading(cells, ov, by_cell, effects) -> list[str]:
  """A few sentences computed from the cells: what the table shows, with intervals, and what
  it does not."""
  ran = [c for c in cells if by_cell.get(c)]
  if not ran:
    return []

  def best(pick):
    chosen = [c for c in ran if pick(ov[c])]
    if not chosen:
      return None
    top = max(chosen, key=lambda c: accepted_length(by_cell[c]))
    return f"{label(ov[top])} {stats.fmt(_accepted_interval(by_cell[top]))}"

  said = []
  for what, pick in (
      ("Longest accepted length", lambda o: True),
      ("under the constraint at T=0", lambda o: o.get("constrained", True)
       and float(o.get("temperature", 0)) == 0),
      ("of a learned drafter under the constraint", lambda o: o.get("constrained", True)
       and o.get("drafter.name") in LEARNED),
      ("of a drafter without a network under the constraint", lambda o: o.get(
          "constrained", True) and o.get("drafter.name", "none") not in LEARNED + ("none",))):
    found = best(pick)
    if found:
      said.append(f"{what}: {found}")
  out = ["### What it shows", "",
         "; ".join(said) + " tokens per round (95% intervals over prompts)."]
  for name, pairs, _, _, pooled, _ in effects:
    out[-1] += (f" {name[:1].upper()}{name[1:]}: accepted length on / off {pooled} over "
                f"{pairs} pairs of cells.")
  out += ["", "What it does not show: speed where users run (tokens/s are one CPU run per "
          "cell with no interval; the projection above is a model), other targets than the "
          "embedded 135M one, or workloads beyond these three; cells not run yet are missing "
          "from every figure (the list of shards left, where there is one, is above).", ""]
  return out


def _position_counts(r: dict, k_max: int) -> tuple[np.ndarray, np.ndarray]:
  """(accepted, drafted) [k_max] of one request: rounds whose i-th draft was accepted, and
  rounds that drafted at least i + 1 tokens."""
  num, den = np.zeros(k_max), np.zeros(k_max)
  for drafted, accepted in r["per_round"]:
    d = min(drafted, k_max)
    den[:d] += 1
    num[:min(accepted, d)] += 1
  return num, den


def _position_rate(counts) -> np.ndarray:
  """Acceptance at each draft position [k_max] over (accepted, drafted) pairs; NaN where
  nothing was drafted."""
  num = np.sum([n for n, _ in counts], axis=0)
  den = np.sum([d for _, d in counts], axis=0)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _per_position(rows, k_max) -> list[float]:
  return [float(x) for x in _position_rate([_position_counts(r, k_max) for r in rows])]


def _per_position_intervals(rows, k_max) -> list[tuple[float, float, float]]:
  """(point, low, high) of the acceptance at each draft position, resampling prompts."""
  units = [[_position_counts(r, k_max) for r in u] for u in stats.by_unit(rows, "item")]
  return stats.bootstrap_each(units, _position_rate)


def _bounds(intervals) -> list[tuple[float, float]]:
  return [(lo, hi) for _, lo, hi in intervals]


COMPILE_KEYS = ("warmup_xla_compile_s", "xla_compile_s", "xla_compiles")  # summed per cell


def _measurements(records) -> dict:
  """Per cell, its timed calls combined (a cell grown in batches has one per batch): tokens/s
  over all of them, host shares weighted by round time, compile seconds and counts summed
  (None where records predate them)."""
  out = {}
  for r in records:
    if r.get("kind") != "measurement":
      continue
    m = out.setdefault(r["cell"], {"tokens": 0, "wall_s": 0.0, "host": 0.0, "weight": 0.0,
                                   **dict.fromkeys(COMPILE_KEYS, 0)})
    weight = r["round_ms"] * r["rounds"]
    m["tokens"] += r["tokens"]
    m["wall_s"] += r["wall_s"]
    m["host"] += r["host_share"] * weight
    m["weight"] += weight
    for key in COMPILE_KEYS:
      m[key] = None if m[key] is None or key not in r else m[key] + r[key]
  return {cell: {"tokens_per_s": m["tokens"] / max(m["wall_s"], 1e-9),
                 "host_share": m["host"] / max(m["weight"], 1e-12),
                 **{key: m[key] for key in COMPILE_KEYS}} for cell, m in out.items()}


def _compile_cell(m: dict) -> str:
  """'warm-up s / timed s (timed compiles)' of a cell's measurements, '-' when unrecorded."""
  if m.get("xla_compiles") is None:
    return "-"
  return f"{m['warmup_xla_compile_s']:.1f} / {m['xla_compile_s']:.1f} ({m['xla_compiles']})"


def _projection_rows(cells, ov, by_cell, c) -> list:
  """Per drafting cell: the projected speedup on each (hardware, target) of
  `projection.columns()`, 'x [lo, hi]' from the accepted length's interval (the speedup
  increases with it)."""
  rows = []
  for cell in cells:
    rs = by_cell.get(cell, [])
    rounds = sum(r["rounds"] for r in rs)
    if not rs or not sum(r["drafted"] for r in rs):
      continue
    o = ov[cell]
    name = o.get("drafter.name", c.drafter.name)
    if name not in projection.DRAFTER_KIND:
      continue
    k = int(o.get("drafter.options.k", config_k(c.drafter)))
    drafted = sum(r["drafted"] for r in rs) / max(rounds, 1)
    context = float(np.mean([r["prompt_tokens"] + r["tokens"] / 2 for r in rs]))
    lanes = int(o.get("lanes", c.lanes))
    point, low, high = _accepted_interval(rs)
    row = [label(o)]
    for hw, shape in projection.columns():
      one = lambda length: projection.speedup(  # noqa: E731
          length, hw, shape, name, k, drafted_per_round=drafted, lanes=lanes,
          context=int(context))
      row.append(stats.fmt((one(point), *(one(x) if not np.isnan(x) else x
                                          for x in (low, high)))))
    rows.append(row)
  return rows


def summarize(records, c, out: Path) -> str:
  reqs = [r for r in records if r.get("kind") == "request"]
  meas = _measurements(records)
  by_cell = collections.defaultdict(list)
  for r in reqs:
    by_cell[r["cell"]].append(r)
  cells = list(dict.fromkeys(r["cell"] for r in records if r.get("kind") == "cell"))
  ov = {r["cell"]: r.get("overrides", {}) for r in records if r.get("kind") == "cell"}
  k_max = max([config_k(c.drafter)] + [int(o.get("drafter.options.k", o.get("drafter.k", 0)))
                                       for o in ov.values()])
  rows = []
  for cell in cells:
    rs, m = by_cell.get(cell, []), meas.get(cell, {})
    if not rs:
      continue
    acc_len = stats.fmt(_accepted_interval(rs))
    done = [r for r in rs if r["valid"] is not None]
    pos = _per_position(rs, k_max)
    rows.append([label(ov[cell]), len(rs), acc_len,
                 " / ".join("-" if np.isnan(p) else f"{p:.2f}" for p in pos),
                 f"{m.get('tokens_per_s', 0):.1f}", _compile_cell(m),
                 f"{100 * m.get('host_share', 0):.1f}",
                 f"{sum(r['valid'] for r in done)}/{len(done)}",
                 sum(r["finish_reason"] == "length" for r in rs),
                 sum(r["jump_forward_tokens"] for r in rs)])
  split = ", validation split of the drafters' prompt mix" if c.split else ""
  table = c.get("reading", "") == "drafters"  # the summary reads a drafter table first
  parts = [c.get("description", ""), "",
           f"Model: {c.model or 'embedded SmolLM2-135M-Instruct (Q4_1 GGUF, f32)'}; workloads "
           f"{', '.join(c.workloads)} ({c.per_workload} each"
           f"{split}); "
           f"{c.max_tokens or 'per-item'} tokens; {c.lanes} lanes.", ""]
  if table:
    from experiments.studies import drafter_table

    parts += drafter_table.reading(records, c) + ["## Every cell", ""]
  parts += [plots.table(["cell", "requests", "accepted length",
                        f"acceptance by draft position 1..{k_max}", "tokens/s",
                        "XLA compile s: warm-up / timed (compiles)", "host % of round",
                        "valid / completed", "hit max_tokens", "jump-forward drafts"], rows), ""]
  # Accepted length per drafter and workload (one bar group per workload), 95% over prompts.
  wl = list(dict.fromkeys(r["workload"] for r in reqs))
  shown, caption = _plotted(cells, ov, by_cell)
  per_wl = {w: [_accepted_interval([r for r in by_cell[cell] if r["workload"] == w])
                for cell in shown] for w in wl}
  if shown:
    name = plots.grouped_bars(out / "accepted_length.png", [label(ov[c]) for c in shown],
                              {w: [p for p, _, _ in v] for w, v in per_wl.items()},
                              intervals={w: _bounds(v) for w, v in per_wl.items()},
                              title=f"Accepted length per drafter and workload{caption}; "
                                    "95% over prompts", ylabel="tokens per round")
    parts += [f"![accepted length]({name})", ""]
    pos = {label(ov[cell]): _per_position_intervals(by_cell[cell], k_max) for cell in shown
           if any(r["drafted"] for r in by_cell[cell]) and ov[cell].get("constrained", True)}
    if pos:
      name = plots.lines(out / "acceptance_by_position.png", list(range(1, k_max + 1)),
                         {k: [p for p, _, _ in v] for k, v in pos.items()},
                         intervals={k: _bounds(v) for k, v in pos.items()},
                         title=f"Acceptance by draft position{caption}; 95% over prompts",
                         xlabel="draft position", ylabel="P(accepted | drafted)",
                         dodge=min(0.3 / max(len(pos), 1), 0.05))
      parts += [f"![acceptance by position]({name})", ""]
  parts += decode_traces.pages(records, ov, out)
  projected = [] if table else _projection_rows(cells, ov, by_cell, c)
  if projected:
    parts += ["### Speedup projected onto other hardware and targets", "",
              "Decode speedup over ordinary decoding if each cell's measured acceptance held "
              "there: accepted length x t(decode step) / (t(draft) + t(verify over 1 + drafted "
              "positions)), each step a roofline (HBM bandwidth, dense bf16 rate, a 20 us "
              "step overhead) of the target's published shape at the cell's lanes and mean "
              "context; the drafter's device work by kind (n-gram and jump-forward none, MTP K "
              "steps of one layer + head, DFlash one pass of 2 layers + head over K). The "
              "interval carries the accepted length's; the model, not a measurement "
              "(`experiments/runner/projection.py` states its assumptions; "
              "`benchmarks/projection_check.py` compares its step times with measured ones, "
              "`docs/results/projection_check.md` on this CPU and "
              "`docs/results/projection_check_h200.md` on an H200).", "",
              plots.table(["cell", *[f"{hw.name} {shape.name}" for hw, shape
                                     in projection.columns()]], projected), ""]
  effects = [] if table else _effects(cells, ov, by_cell)
  parts += [] if table else _reading(cells, ov, by_cell, effects)
  if effects:
    parts += ["### Effect of one axis", "",
              "Pairs of cells that differ in that axis only: accepted length with it on / "
              "with it off (median over pairs, range, and the pair with the largest ratio); "
              "pooled: the ratio over every prompt of every pair with its paired bootstrap "
              "95% interval (whole prompts resampled on both sides at once).", "",
              plots.table(["axis", "pairs", "median ratio", "range", "pooled [95% CI]",
                           "largest in"], effects, "lrrrrl"), ""]
  parts += ["Accepted length: tokens per round (accepted drafts + 1), with a 95% percentile "
            "bootstrap interval over prompts (2,000 resamples, seed 0; a prompt's requests are "
            "drawn together, and the ratio is recomputed over the drawn requests). Acceptance "
            "by position i: rounds whose i-th draft was accepted / rounds that drafted at "
            "least i; the table gives the point, the plot its 95% interval over prompts (the "
            "same resampling). The bar plot's intervals resample the prompts of each workload "
            "alone. Tokens/s and host %: one timed call over the cell's requests, so no "
            "interval. XLA compile s: compilation before the timed call (the engine's "
            "`warmup()` in the cell that builds it) and inside it, with the count of "
            "compilations inside it (0: tokens/s excludes compilation). Host %: host begin + "
            "mask + commit time over round time. Valid: "
            "completed outputs accepted by the workload's oracle (jsonschema, label set, "
            "regex)."]
  return "\n".join(parts)


def samples(c) -> bool:
  """Whether the cell's drafter samples its drafts (so a mask on q can matter): its options
  say so (`sampling`), or it drafts at a `temperature` without such a switch."""
  from infernix_jax.runtime import drafters

  spec = engine_spec(c)
  own = drafters.fields(spec.drafter)
  if "sampling" in own:
    return bool(spec.drafter_options.get("sampling", own["sampling"]))
  return "temperature" in own


def skip(c) -> str | None:
  """Cells that repeat another: masked q off differs only where a sampled q meets a mask; a
  tree asked of a drafter that proposes chains only is its chain cell."""
  from infernix_jax.runtime import drafters
  if not c.masked_q and not (samples(c) and c.constrained and c.temperature > 0):
    return "masked q changes nothing here (one-hot q, greedy, or no constraint)"
  if c.drafter.options.get("tree") and "tree" not in drafters.fields(c.drafter.name):
    return f"drafter {c.drafter.name!r} proposes chains only (no tree option)"
  return None
