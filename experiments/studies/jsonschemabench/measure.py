"""The jsonschemabench study's three measurements, one generator of records per table:

  coverage    per schema of a seeded sample of the subset: does the backend compile it
              strictly (no silent relaxing), in how long (byte vocabulary), and the verdicts
              of its real matcher on the schema's MaskBench instances
  efficiency  per request through the engine on the target model: grammar compile time, time
              to first token and time per output token, constraint on (per backend) or off
  mask        per schema: the time of each token's mask step (mask + advance) over its
              valid MaskBench instances, tokenized with a big vocabulary (MaskBench's TBM),
              through our session

Records carry "kind" ("schema" | "request" | "mask"), "subset" and "backend"; each work unit
is followed by a progress record (counted by the runner's bar, not stored).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Iterator

import numpy as np

SMALL_SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'


def _progress(label: str) -> dict:
  return {"kind": "progress", "item": label}


# --- coverage --------------------------------------------------------------------------------


def coverage(c, data: Path, ctx) -> Iterator[dict]:
  """One "schema" record per sampled schema: covered (compiled strictly), the refused
  keyword or construct, compile seconds, and the MaskBench verdicts (valid accepted, invalid
  rejected, with the explained narrowings and gaps counted apart). Backend "auto" records
  only the backend the compiler takes per schema under "auto" (the first of
  `backends.candidates` that compiles it; the first candidate where none does): the summary
  takes that backend's figures."""
  from infernix_jax import constrain as ic
  from infernix_jax.constrain import backends
  from infernix_jax.testing import schema_bench as sb
  from infernix_jax.testing.schema_oracle import SearchBudgetExceeded

  files = sb.sample_files(data, c.subset, c.coverage_schemas, c.seed)
  base = {"kind": "schema", "subset": c.subset, "backend": c.backend}
  if c.backend == "auto":
    compiler = ic.ConstraintCompiler(ctx.get("byte_vocab", "bytes", sb.byte_vocab))
    for f in files:
      spec = ic.OutputConstraint.json_schema(f.read_text(encoding="utf-8"))
      try:
        resolved = compiler.compile(spec).backend
      except ic.ConstraintError:
        resolved = backends.resolve(spec)
      compiler.clear()
      yield {**base, "schema": f.name, "resolved": resolved}
      yield _progress(f.name)
    return
  vocab = ctx.get("byte_vocab", "bytes", sb.byte_vocab)
  backend = backends.get(c.backend)
  for f in files:
    text = f.read_text(encoding="utf-8")
    rec = {**base, "schema": f.name, "covered": False, "error": None, "compile_s": 0.0,
           "valid": 0, "valid_accepted": 0, "invalid": 0, "invalid_rejected": 0,
           "narrowed": 0, "known_gap": 0, "budget": 0, "replay_failures": 0}
    t0 = time.perf_counter()
    try:
      built = backend.build(vocab, ic.OutputConstraint.json_schema(text))
    except ic.ConstraintError as e:
      rec["error"] = sb.error_key(e) if c.backend == "llguidance" else sb.keyword_of(e)
    except Exception as e:  # noqa: BLE001  (a library crash counts as not covered, named)
      rec["error"] = f"crash: {type(e).__name__}"
    else:
      rec["covered"] = True
    rec["compile_s"] = time.perf_counter() - t0
    if rec["covered"]:
      walker = sb.walker_for(text, c.walk_budget)
      for case in sb.maskbench_cases(data, c.subset, f):
        value, valid = case["data"], bool(case["valid"])
        try:
          if c.backend == "llguidance":
            ok = sb.llguidance_accepts(backend, built, walker, value)
          else:
            ok = sb.xgrammar_accepts(built.grammar, walker, value)
        except SearchBudgetExceeded:
          rec["budget"] += 1
          continue
        except AssertionError:
          rec["replay_failures"] += 1
          continue
        if valid:
          rec["valid"] += 1
          rec["valid_accepted"] += ok
          if not ok and (sb.llg_narrowing(value, text) if c.backend == "llguidance"
                         else sb.xgrammar_narrowing(value, built.compiled_source)):
            rec["narrowed"] += 1
        else:
          rec["invalid"] += 1
          rec["invalid_rejected"] += not ok
          if ok and c.backend != "llguidance" and sb.xgrammar_known_gap(
              value, built.compiled_source):
            rec["known_gap"] += 1
    yield rec
    yield _progress(f.name)


# --- efficiency ------------------------------------------------------------------------------


def efficiency_items(c, ctx) -> list:
  """The efficiency sample: `c.efficiency_schemas` items of `jsonschema:<subset>` (schemas up
  to 800 characters that our strict checker accepts, seeded draw), the same for every
  backend so that requests pair by schema."""
  from experiments import workloads

  return ctx.get(f"items/{c.subset}", (c.subset, c.efficiency_schemas, c.seed),
                 lambda: workloads.load(f"jsonschema:{c.subset}", c.efficiency_schemas,
                                        seed=c.seed))


def _engine(c, ctx):
  """(engine, tokenizer, compiler) of `c.model` with one lane and no drafter (batch 1, one
  token per round, as the paper's efficiency runs), warmed up: JAX compilation, the
  vocabulary's per-backend indexes, and one constrained request per backend are out of the
  timings."""
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import GenerationRequest, compile_cache
  from infernix_jax.runtime.build import EngineSpec, build_engine
  from infernix_jax.train.corpus import load_target

  def make():
    compile_cache.enable()
    target = load_target(c.model or None)[0]
    compiler = ic.ConstraintCompiler(target.vocab)
    spec = EngineSpec(drafter="none", jump_forward=False, lanes=1, capacity=c.capacity)
    eng = build_engine(spec, target=target, compiler=compiler).engine
    eng.warmup()
    ids = list(target.tokenizer.encode("Answer as JSON."))
    small = ic.OutputConstraint.json_schema(SMALL_SCHEMA)
    eng.generate([GenerationRequest(ids, max_tokens=4)]
                 + [GenerationRequest(ids, max_tokens=4, constraint=small, backend=b)
                    for b in ("xgrammar", "llguidance")])
    return eng, target.tokenizer, eng.compiler  # the compiler the engine really uses

  return ctx.get("engine", (c.model, c.capacity), make)


def efficiency(c, data: Path, ctx) -> Iterator[dict]:
  """One "request" record per sampled schema, run alone (batch 1): TTFT (submit to the first
  streamed token; it includes the grammar compile, the compile cache cleared before each
  request, as the paper's TTFT includes GCT), TPOT (first to last token over the tokens after
  the first), GCT (the request's compile seconds), the backend that compiled it
  (`resolved`: under "auto", the one the compiler took), tokens, finish reason and validity.
  Greedy decoding, `c.max_tokens` tokens at most. XLA compilations of the timed call
  (`xla_compiles`, `xla_compile_s`: 0 after the warm-up) and, on the first record, of the
  warm-up before them (`warmup_xla_compiles`, `warmup_xla_compile_s`)."""
  from infernix_jax.chat_template import frame_prompt
  from infernix_jax.runtime import GenerationRequest, SamplingOptions, compile_count

  from infernix_jax import constrain as ic

  with compile_count.counting() as warmed:
    eng, tok, compiler = _engine(c, ctx)
    items = efficiency_items(c, ctx)
    prompts = [list(tok.encode(frame_prompt(tok, item.prompt))) for item in items]
    # Prefill shapes of these prompts and this backend's first request run here, untimed.
    warm = [GenerationRequest(ids, max_tokens=2) for ids in prompts]
    if c.backend != "off":
      warm.append(GenerationRequest(prompts[0] if prompts else [0], max_tokens=2,
                                    constraint=ic.OutputConstraint.json_schema(SMALL_SCHEMA),
                                    backend=None if c.backend == "auto" else c.backend))
    for req in warm:
      eng.generate([req])
  for i, (item, ids) in enumerate(zip(items, prompts)):
    constrained = c.backend != "off"
    events: list[tuple[float, int]] = []

    def on_token(ev, events=events):
      events.append((time.perf_counter(), len(ev.token_ids)))

    req = GenerationRequest(
        ids, max_tokens=c.max_tokens, on_token=on_token,
        constraint=item.output_constraint() if constrained else None,
        backend=None if c.backend in ("auto", "off") else c.backend,
        sampling=SamplingOptions(temperature=0.0, seed=c.seed + i))
    compiler.clear()  # every request compiles its grammar cold (GCT inside TTFT)
    with compile_count.counting() as compiles:
      t0 = time.perf_counter()
      res = eng.generate([req])[0]
      wall = time.perf_counter() - t0
    timed = [(t, n) for t, n in events if n > 0]
    tokens = sum(n for _, n in timed)
    ttft = timed[0][0] - t0 if timed else math.nan
    after = tokens - (timed[0][1] if timed else 0)
    tpot = (timed[-1][0] - timed[0][0]) / after if after > 0 else math.nan
    report = res.constraint
    completed = res.finish_reason.value == "stop"
    yield {"kind": "request", "subset": c.subset, "backend": c.backend, "item": item.id,
           "prompt_tokens": len(ids), "tokens": len(res.token_ids), "ttft_s": ttft,
           "tpot_s": tpot, "wall_s": wall,
           "compile_s": report.compile_seconds if report else 0.0, **compiles.record(),
           **(warmed.record("warmup_") if i == 0 else {}),
           "cache": report.cache if report else "",
           "resolved": report.backend if report else "",  # the backend that compiled it
           "finish_reason": res.finish_reason.value,
           "error": res.error, "valid": item.validate(res.text) if completed else None}


# --- mask ------------------------------------------------------------------------------------


def _mask_vocab(c, data: Path, ctx):
  """(Vocabulary, tokenizers.Tokenizer) of `c.mask_tokenizer` (a tokenizer.json under the
  data folder; Qwen3's ids are padded to 151,936)."""
  from tokenizers import Tokenizer

  from infernix_jax import constrain as ic

  path = data / c.mask_tokenizer

  def make():
    if not path.exists():
      from experiments.workloads import WorkloadUnavailable

      raise WorkloadUnavailable(f"{path} is absent (config.mask_tokenizer under the shared "
                                "data folder)")
    padded = 151936 if "qwen3" in str(path) else None
    vocab = (ic.Vocabulary.from_tokenizer_json(path, padded_size=padded) if padded
             else ic.Vocabulary.from_tokenizer_json(path))
    return vocab, Tokenizer.from_file(str(path))

  return ctx.get("mask_vocab", str(path), make)


def _texts(c, data: Path, f: Path, backend, byte_vocab) -> list[str]:
  """Serializations of the schema's valid MaskBench instances that the backend's own
  grammar accepts (found by the walker on the byte vocabulary); [] where it refuses the
  schema."""
  from infernix_jax import constrain as ic
  from infernix_jax.testing import schema_bench as sb
  from infernix_jax.testing.schema_oracle import SearchBudgetExceeded

  text = f.read_text(encoding="utf-8")
  try:
    built = backend.build(byte_vocab, ic.OutputConstraint.json_schema(text))
  except Exception:  # noqa: BLE001  (not covered: no masks to time)
    return []
  walker = sb.walker_for(text, c.walk_budget)
  out = []
  for case in sb.maskbench_cases(data, c.subset, f):
    if not case["valid"]:
      continue
    try:
      ok = (sb.llguidance_accepts(backend, built, walker, case["data"])
            if c.backend == "llguidance" else
            sb.xgrammar_accepts(built.grammar, walker, case["data"]))
    except (SearchBudgetExceeded, AssertionError):
      continue
    if ok:
      out.append(walker.text)
  return out


def masks(c, data: Path, ctx) -> Iterator[dict]:
  """One "mask" record per sampled schema with valid instances the backend accepts: the
  compile seconds on the big vocabulary (MaskBench's TTFM) and the microseconds of each
  token's mask step, as MaskBench times masks over valid instances: `session.fill_mask` of
  the committed state plus `session.accept` of the token. Our session computes a state's
  mask while it accepts the token that leads there (preview fills it, commit caches it, and
  fill_mask then copies it), so mask and advance are timed together: one mask computation
  per token, the token's advance included. The first step computes the initial mask, the
  last is the one before EOS."""
  from infernix_jax import constrain as ic
  from infernix_jax import mask_layout
  from infernix_jax.constrain import backends
  from infernix_jax.testing import schema_bench as sb

  vocab, tok = _mask_vocab(c, data, ctx)
  bytes_vocab = ctx.get("byte_vocab", "bytes", sb.byte_vocab)
  backend = backends.get(c.backend)
  compiler = ic.ConstraintCompiler(vocab)
  eos = vocab.eos_ids[0]
  out = np.zeros(vocab.mask_words, np.int32)
  for f in sb.sample_files(data, c.subset, c.mask_schemas, c.seed):
    texts = _texts(c, data, f, backend, bytes_vocab)
    if not texts:
      yield _progress(f.name)
      continue
    compiler.clear()
    compiled = compiler.compile(ic.OutputConstraint.json_schema(f.read_text(encoding="utf-8")),
                                backend=c.backend)
    times, refused = [], 0
    for text in texts:
      session = compiled.new_session()
      for t in tok.encode(text, add_special_tokens=False).ids + [eos]:
        t0 = time.perf_counter()
        session.fill_mask(out)
        ok = mask_layout.bit(out, t) and session.accept([t]).accepted == 1
        times.append(1e6 * (time.perf_counter() - t0))
        if not ok:
          refused += 1
          break
    yield {"kind": "mask", "subset": c.subset, "backend": c.backend, "schema": f.name,
           "instances": len(texts), "tokens": len(times), "refused": refused,
           "compile_s": compiled.compile_seconds, "mask_us": [round(x, 2) for x in times]}
    yield _progress(f.name)
