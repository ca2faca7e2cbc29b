"""Ours vs the Python peer (transformers + XGrammar) on the embedded SmolLM2, in one run.

The peer is what a Python user of the same model runs: Hugging Face transformers (torch, f32)
loading the same GGUF, greedy `generate` (a left-padded batch at lanes > 1), with XGrammar's
HF logits processor (`xgrammar.contrib.hf.LogitsProcessor`) on constrained workloads. Ours is
`runtime.Engine` with every registered drafter (plus the main job's ngram+jump). The same run
measures the weight-streaming floor (the model's weight bytes / the bandwidth of a jitted f32
GEMV over a ~450 MB matrix) and checks that ours and the peer emit the same greedy tokens.

Workload sets: `main` (the CLI's main job: DEMO_PROMPT under DEMO_SCHEMA, chat-framed as
`make run` frames it), `free` (the same prompt unconstrained) and `schemas` (JSONSchemaBench
schemas of one subset, sorted by file name, that both our compiler and the peer's compile).
At L lanes the single-prompt sets run L copies of their prompt. Token identity, tables and
the report (`--write`): `_peer_report.py`.

  .venv/bin/python benchmarks/peer_bench.py [--quick] [--max-tokens 64] [--prompts 20]
      [--lanes 1,4] [--drafters none,ngram,...] [--no-peer] [--dtype bfloat16] [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

from _timing import GEMV_SHAPE, gemv_bandwidth
from _peer_report import (REPORT, ROOT, compare, dump, environment, goals_text, notes_text,
                          table, write_report)

DATA = ROOT.parent / "shared/data/jsonschemabench/data"
MAIN_JOB = "ngram+jump"  # the CLI's default configuration for a constrained prompt
QUICK_DRAFTERS = ("none", "ngram", MAIN_JOB)


@dataclasses.dataclass(frozen=True)
class Workload:
  """One prompt: its chat-framed text and ids, and its JSON Schema (None: unconstrained)."""

  name: str
  text: str
  ids: tuple[int, ...]
  schema: str | None


@dataclasses.dataclass
class Run:
  """One system's generations over a workload set at one lane count."""

  tokens: list[list[int]]  # per prompt, EOS included when emitted
  seconds: float
  accepted_length: float | None = None  # ours: tokens per round
  gaps: list | None = None  # peer: per prompt, top-1 minus top-2 processed logit per step
  errors: tuple[str, ...] = ()
  load: float | None = None  # 1-minute load average when the run ended
  xla: dict | None = None  # ours: XLA compilations of the timed run (and its warm-up before)


# --- workloads ------------------------------------------------------------------------------
def workload_sets(args, tok, accepts) -> tuple[dict[str, list[Workload]], dict[str, int]]:
  """The workload sets; `accepts(schema)` returns None or why a schema is skipped."""
  from infernix_jax.chat_template import frame_prompt
  from infernix_jax.cli import generate as cli

  def make(name, prompt, schema):
    text = frame_prompt(tok, prompt)
    return Workload(name, text, tuple(tok.encode(text)), schema)

  sets, skipped = {}, {}
  if "main" in args.sets:
    sets["main"] = [make("main", cli.DEMO_PROMPT, cli.DEMO_SCHEMA)]
  if "free" in args.sets:
    sets["free"] = [make("free", cli.DEMO_PROMPT, None)]
  if "schemas" in args.sets:
    items = []
    paths = ([DATA / f for f in args.schema_files.split(",")] if args.schema_files
             else sorted((DATA / args.subset).glob("*.json")))
    for path in paths:
      if len(items) == args.prompts:
        break
      schema = json.dumps(json.loads(path.read_text(encoding="utf-8")))
      why = "longer than --max-schema-chars" if len(schema) > args.max_schema_chars else (
          accepts(schema))
      if why:
        skipped[why] = skipped.get(why, 0) + 1
        continue
      items.append(make(f"{path.parent.name}/{path.stem}",
                        f"Answer as JSON following this schema: {schema}", schema))
    sets["schemas"] = items
  return sets, skipped


def batch_of(items: list[Workload], lanes: int) -> list[Workload]:
  """A single-prompt set runs one copy per lane; larger sets run as they are."""
  return items * lanes if len(items) == 1 else items


# --- the floor ------------------------------------------------------------------------------
def weight_bytes(model) -> int:
  """Bytes of the model's parameter arrays (tied embeddings counted once)."""
  import jax
  from flax import nnx
  return sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def floor_of(model, repeats: int) -> dict:
  """The weight-streaming floor: weight bytes / GEMV bandwidth = ms per weight pass."""
  weights = weight_bytes(model)
  bandwidth = gemv_bandwidth(repeats)
  return dict(weight_bytes=weights, repeats=repeats, gemv_shape=GEMV_SHAPE,
              gemv_gb_s=bandwidth / 1e9, floor_ms=1e3 * weights / bandwidth)


# --- the peer -------------------------------------------------------------------------------
class Peer:
  """transformers + XGrammar as a Python user runs them: one model, greedy `generate`."""

  def __init__(self, path: Path, max_whitespace: int):
    import torch
    import transformers
    import xgrammar
    from xgrammar.contrib import hf as xgr_hf

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    self.torch, self.xgrammar, self.xgr_hf = torch, xgrammar, xgr_hf
    kwargs = dict(gguf_file=path.name)
    self.tok = transformers.AutoTokenizer.from_pretrained(path.parent, **kwargs)
    self.model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, dtype=torch.float32, **kwargs).eval()
    gen = self.model.generation_config
    eos = gen.eos_token_id
    self.eos = set(eos if isinstance(eos, list) else [eos])
    self.pad = gen.pad_token_id if gen.pad_token_id is not None else min(self.eos)
    info = xgrammar.TokenizerInfo.from_huggingface(self.tok,
                                                   vocab_size=self.model.config.vocab_size)
    self.compiler = xgrammar.GrammarCompiler(info)
    self.max_whitespace = max_whitespace
    self._grammars: dict[str, object] = {}

  def compile(self, schema: str):
    """The schema's grammar, compiled with our backend's JSON settings (cached)."""
    if schema not in self._grammars:
      # strict_mode=False and the whitespace bound are what our xgrammar backend uses, so
      # both systems decode under the same language.
      self._grammars[schema] = self.compiler.compile_json_schema(
          schema, any_whitespace=True, max_whitespace_cnt=self.max_whitespace,
          strict_mode=False)
    return self._grammars[schema]

  def allows(self, schema: str, prefix: list[int], token: int) -> bool:
    """Whether the peer's grammar accepts `token` after `prefix` (which it accepts)."""
    matcher = self.xgrammar.GrammarMatcher(self.compile(schema))
    return all(matcher.accept_token(t) for t in prefix) and matcher.accept_token(token)

  def encode(self, text: str) -> list[int]:
    return self.tok(text, add_special_tokens=False)["input_ids"]

  def run(self, items: list[Workload], lanes: int, max_tokens: int) -> Run:
    """Generates every prompt, `lanes` at a time (left-padded batches)."""
    tokens, gaps, seconds = [], [], 0.0
    for i in range(0, len(items), lanes):
      out, g, t = self._generate(items[i:i + lanes], max_tokens)
      seconds += t
      tokens += out
      gaps += g
    return Run(tokens, seconds, gaps=gaps)

  def _generate(self, chunk: list[Workload], max_tokens: int):
    torch = self.torch
    ids = [self.encode(w.text) for w in chunk]
    width = max(map(len, ids))
    input_ids = torch.tensor([[self.pad] * (width - len(r)) + r for r in ids])  # [B, T]
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids])
    processors = []
    if chunk[0].schema is not None:
      processors = [self.xgr_hf.LogitsProcessor([self.compile(w.schema) for w in chunk])]
    start = time.perf_counter()
    with torch.no_grad():
      out = self.model.generate(
          input_ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=False,
          logits_processor=processors, pad_token_id=self.pad, return_dict_in_generate=True,
          output_scores=True)
    seconds = time.perf_counter() - start
    top2 = torch.stack(out.scores, 1).topk(2, dim=-1).values  # [B, steps, 2]
    gap = (top2[..., 0] - top2[..., 1]).numpy()
    rows = []
    for row in out.sequences[:, width:].tolist():
      cut = next((j + 1 for j, t in enumerate(row) if t in self.eos), len(row))
      rows.append(row[:cut])
    return rows, list(gap), seconds


# --- ours -----------------------------------------------------------------------------------
def make_engine(label: str, k: int, lanes: int, base, target, compiler):
  """An engine of `name` or `name+jump` from the registry (the rest of `base`, an
  EngineSpec); (engine, None) or (None, why it cannot run)."""
  from infernix_jax.runtime import drafters
  from infernix_jax.runtime.build import build_engine
  name, _, wrap = label.partition("+")
  if name not in drafters.names() or wrap not in ("", "jump"):
    raise SystemExit(f"--drafters: {label!r} is not a registered drafter (with an optional "
                     f"'+jump'); registered: {', '.join(drafters.names())}")
  spec = dataclasses.replace(base, drafter=name, jump_forward=bool(wrap), lanes=lanes,
                             drafter_options={"k": k} if "k" in drafters.fields(name) else {})
  try:
    return build_engine(spec, target=target, compiler=compiler).engine, None
  except ValueError as e:  # e.g. the draft model drafter without a draft model
    return None, f"n/a: needs a checkpoint ({str(e).partition(' (')[0]})"


def warm_up(engine, items: list[Workload], constraint_of):
  """Compiles what the timed runs use (`Engine.warmup`: every admission and round shape) and
  pays the host's first-call costs (a free and a constrained request) -> the XLA
  compilations of both (`compile_count.CompileCount`)."""
  from infernix_jax.runtime import GenerationRequest, compile_count
  with compile_count.counting() as warm:
    engine.warmup(prompt_lengths=[len(w.ids) for w in items])
    first = {w.schema is None: w for w in reversed(items)}  # the first free, constrained
    engine.generate([GenerationRequest(list(w.ids), max_tokens=4, constraint=constraint_of(w))
                     for w in first.values()])
  return warm


def run_ours(engine, items: list[Workload], max_tokens: int, constraint_of,
             warm=None) -> Run:
  """The timed run of `items`; `warm`: the CompileCount of the warm-up just before it."""
  from infernix_jax.runtime import FinishReason, GenerationRequest, accepted_length, compile_count
  requests = [GenerationRequest(list(w.ids), max_tokens=max_tokens, constraint=constraint_of(w))
              for w in items]
  with compile_count.counting() as timed:
    start = time.perf_counter()
    results = engine.generate(requests)
    seconds = time.perf_counter() - start
  eos = min(engine.vocab.eos_ids)
  tokens = [list(r.token_ids) + ([eos] if r.finish_reason == FinishReason.STOP else [])
            for r in results]
  rounds = sum(len(r.rounds) for r in results)
  accepted = accepted_length(sum(r.accepted for r in results), rounds)
  return Run(tokens, seconds, accepted_length=accepted,
             errors=tuple(r.error for r in results if r.error),
             xla={**timed.record(), **(warm.record("warmup_") if warm is not None else {})})


# --- main -----------------------------------------------------------------------------------
def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true",
                  help=f"main job + 3 schemas, 1 lane, drafters {','.join(QUICK_DRAFTERS)}")
  ap.add_argument("--max-tokens", type=int, default=64)
  ap.add_argument("--prompts", type=int, default=None, help="JSONSchemaBench prompts (20)")
  ap.add_argument("--lanes", default=None, help="comma-separated lane counts (1,4)")
  ap.add_argument("--drafters", default=None,
                  help="comma-separated registered names, each optionally +jump (default: "
                       f"all registered and {MAIN_JOB})")
  ap.add_argument("--sets", default=None, help="comma-separated of main,free,schemas "
                  "(default: all; --quick: main,schemas)")
  ap.add_argument("--subset", default="Github_easy", help="JSONSchemaBench subset folder")
  ap.add_argument("--schema-files", default=None,
                  help="comma-separated JSONSchemaBench files (Subset/name.json) instead of "
                       "the first --prompts of --subset")
  ap.add_argument("--backend", default="auto",
                  help="our constraint backend: auto (the fastest exact one per constraint) "
                       "or a registered name")
  ap.add_argument("--max-schema-chars", type=int, default=2000,
                  help="skip schemas longer than this (compact JSON)")
  ap.add_argument("--k", type=int, default=4, help="drafts per round")
  ap.add_argument("--dtype", default=None, help="our model's dtype: float32 | bfloat16")
  ap.add_argument("--layout", default="unrolled", help="our layer layout: unrolled | stacked")
  ap.add_argument("--weights", default=None,
                  help="our layer-matrix storage with --layout unrolled: float32 | bfloat16 | "
                       "int8 (default: the model dtype)")
  ap.add_argument("--model", default=None, help="a GGUF file (default: the embedded SmolLM2)")
  ap.add_argument("--no-peer", action="store_true", help="skip transformers + XGrammar")
  ap.add_argument("--torch-threads", type=int, default=0,
                  help="the peer's torch intra-op threads (0: torch's default)")
  ap.add_argument("--gemv-repeats", type=int, default=10)
  ap.add_argument("--write", action="store_true", help=f"write {REPORT.relative_to(ROOT)}")
  ap.add_argument("--json-out", default=None, help="rows, tokens and mismatches as JSON "
                  "(rewritten after every system)")
  args = ap.parse_args(argv)
  args.prompts = args.prompts if args.prompts is not None else (3 if args.quick else 20)
  args.lanes = [int(x) for x in (args.lanes or ("1" if args.quick else "1,4")).split(",")]
  args.sets = (args.sets or ("main,schemas" if args.quick else "main,free,schemas")).split(",")
  if bad := [s for s in args.sets if s not in ("main", "free", "schemas")]:
    ap.error(f"--sets: {bad} must be among main, free, schemas")
  if args.drafters is not None:
    args.drafters = args.drafters.split(",")
  elif args.quick:
    args.drafters = list(QUICK_DRAFTERS)
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  peer_missing = None
  if not args.no_peer:
    # torch's OpenMP threads spin while they wait; on a machine whose cores are shared with
    # other jobs that collapses its decoding ~10x. Sleeping waiters keep the peer honest.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:  # before infernix_jax.constrain: it would load xgrammar with torch stubbed out
      import torch  # noqa: F401
      import transformers  # noqa: F401
      import xgrammar  # noqa: F401
      from xgrammar.contrib import hf  # noqa: F401
    except ImportError as e:
      peer_missing = f"peer skipped: {e}"
      print(peer_missing, flush=True)
    else:
      if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

  from infernix_jax import constrain as ic
  from infernix_jax import models as im
  from infernix_jax.constrain.spec import DEFAULT_MAX_WHITESPACE
  from infernix_jax.runtime import compile_cache, drafters
  from infernix_jax.runtime.build import EngineSpec, load_target

  compile_cache.enable()
  env = environment(args)
  print(f"# {env['date']} {env['machine']}, JAX on {env['device']}, "
        f"load {env['load_average']:.1f}", flush=True)
  path = Path(args.model) if args.model else im.default_model_path()
  start = time.perf_counter()
  base = EngineSpec(model=str(path), dtype=args.dtype, layout=args.layout,
                    weights=args.weights)
  target = load_target(base)
  cfg, model, tok = target.cfg, target.model, target.tokenizer
  compiler = ic.ConstraintCompiler(target.vocab)
  print(f"# ours: {path.name} loaded in {time.perf_counter() - start:.1f} s "
        f"({cfg.dtype}, {args.layout} layout, {args.weights or cfg.dtype} layer weights)",
        flush=True)
  peer = None
  if not args.no_peer and peer_missing is None:
    start = time.perf_counter()
    peer = Peer(path, DEFAULT_MAX_WHITESPACE)
    print(f"# peer: transformers loaded in {time.perf_counter() - start:.1f} s", flush=True)

  specs: dict[str, object] = {}

  def constraint_of(w: Workload):
    if w.schema is None:
      return None
    if w.schema not in specs:
      specs[w.schema] = ic.OutputConstraint.json_schema(w.schema).with_backend(args.backend)
    return specs[w.schema]

  def accepts(schema: str) -> str | None:
    try:
      compiler.compile(constraint_of(Workload("", "", (), schema)))
    except ic.ConstraintError as e:  # UnsupportedSchemaError, UnsupportedConstraintError, ...
      return f"{type(e).__name__} (ours)"
    if peer is not None:
      try:
        peer.compile(schema)
      except Exception as e:  # noqa: BLE001 (xgrammar raises RuntimeError and others)
        return f"{type(e).__name__} (peer's xgrammar)"
    return None

  def judge(w: Workload, prefix: list[int], ours: int, theirs: int) -> tuple[bool, bool]:
    """(our token legal in the peer's grammar, the peer's token legal in ours)."""
    session = compiler.compile(constraint_of(w)).new_session()
    ok = session.preview([*prefix, theirs]).accepted == len(prefix) + 1
    session.discard()
    return peer.allows(w.schema, prefix, ours), ok

  sets, skipped = workload_sets(args, tok, accepts)
  n_schemas = len(sets.get("schemas", ()))
  print("# sets: " + ", ".join(f"{k} ({len(v)})" for k, v in sets.items())
        + (f"; schemas skipped: {skipped}" if skipped else ""), flush=True)
  extra = []
  if peer is not None:
    differ = [w.name for v in sets.values() for w in v if list(w.ids) != peer.encode(w.text)]
    extra.append(f"Prompt ids: transformers' tokenizer differs from ours on {differ} (the peer "
                 f"decodes from its own)." if differ else
                 "Prompt ids: identical in transformers' tokenizer and ours for every prompt.")
    print("# " + extra[-1], flush=True)

  floor = floor_of(model, args.gemv_repeats)
  print(f"# floor: {floor['weight_bytes'] / 1e6:.0f} MB / {floor['gemv_gb_s']:.1f} GB/s = "
        f"{floor['floor_ms']:.2f} ms per weight pass", flush=True)

  every = [w for v in sets.values() for w in v]
  capacity = -(-(max(len(w.ids) for w in every) + args.max_tokens + args.k + 1) // 64) * 64
  labels = args.drafters or [*drafters.names(), MAIN_JOB]
  runs: dict[tuple[str, int, str], Run] = {}
  notes: dict[str, str] = {}
  state = dict(rows=[], mismatches=[])

  def record(system: str, run_fn):
    for lanes in args.lanes:
      for set_name, items in sets.items():
        if not items:
          continue
        run = run_fn(batch_of(items, lanes), lanes)
        run.load = os.getloadavg()[0]
        runs[(set_name, lanes, system)] = run
        n = sum(map(len, run.tokens))
        print(f"{set_name:8s} lanes={lanes} {system:12s} {n:5d} tokens "
              f"{n / run.seconds:7.1f} tok/s" + (f" accepted length {run.accepted_length:.2f}"
                                                 if run.accepted_length else "")
              + (f" errors: {run.errors[:2]}" if run.errors else ""), flush=True)

  if peer is not None:
    def peer_fn(items, lanes):
      peer.run(items[:lanes], lanes, 8)  # warm-up: first-call costs of torch and xgrammar
      return peer.run(items, lanes, args.max_tokens)
    record("peer", peer_fn)
    systems = ["peer"]
  else:
    systems = []
  base = dataclasses.replace(base, capacity=capacity)
  for label in labels:
    first, why = make_engine(label, args.k, args.lanes[0], base, target, compiler)
    if first is None:
      notes[label] = why
      print(f"{label}: {why}", flush=True)
      continue
    systems.append(label)
    if first.drafter.on_device:  # no weights option: the ones shipped for the embedded model
      notes[label] = "the network's weights shipped for the embedded model"
    engines, warmed = {args.lanes[0]: first}, set()

    def ours_fn(items, lanes, label=label, engines=engines, warmed=warmed):
      if lanes not in engines:
        engines[lanes] = make_engine(label, args.k, lanes, base, target, compiler)[0]
      warm = None
      if lanes not in warmed:
        warm = warm_up(engines[lanes], every, constraint_of)
        warmed.add(lanes)
      return run_ours(engines[lanes], items, args.max_tokens, constraint_of, warm)
    record(label, ours_fn)
    state.update(report(args, sets, runs, systems, notes, floor, tok, judge if peer else None))
    dump(args, env, floor, skipped, state, runs)
  state.update(report(args, sets, runs, systems, notes, floor, tok, judge if peer else None))
  dump(args, env, floor, skipped, state, runs)
  ref_name = "peer" if peer is not None else (systems[0] if systems else None)
  lines = table(state["rows"], ref_name)
  print("\n" + "\n".join(lines))
  text_notes = notes_text(args, skipped, n_schemas, notes, state["mismatches"], ref_name,
                          [peer_missing] if peer_missing else extra)
  if ref_name == "peer":
    text_notes += ["", *goals_text(state["rows"])]
  print("\n" + "\n".join(text_notes))
  if args.write:
    write_report(env, floor, lines, text_notes)
  return 0


def report(args, sets, runs, systems, notes, floor, tok, judge) -> dict:
  """Table rows (per set, lanes, system and the n/a drafters) and the token mismatches."""
  ref_name = "peer" if "peer" in systems else (systems[0] if systems else None)
  rows, mismatches = [], []
  for lanes in args.lanes:
    for set_name, items in sets.items():
      batch = batch_of(items, lanes)
      ref = runs.get((set_name, lanes, ref_name))
      peer = runs.get((set_name, lanes, "peer"))
      for system in systems:
        run = runs.get((set_name, lanes, system))
        if run is None:
          continue
        n = sum(map(len, run.tokens))
        tps = n / run.seconds if run.seconds > 0 else None
        ms = 1e3 * run.seconds / n if n else None
        diff = compare(run, ref, batch, tok.decode, judge) if (
            ref is not None and system != ref_name) else []
        for d in diff:
          mismatches.append(dict(set=set_name, lanes=lanes, system=system, **d))
        rows.append(dict(
            set=set_name, lanes=lanes, system=system, prompts=len(batch), tokens=n,
            tokens_per_s=tps, ms_per_token=ms,
            floor_ratio=ms / (floor["floor_ms"] / lanes) if ms else None,
            accepted_length=run.accepted_length,
            vs_peer=tps / (sum(map(len, peer.tokens)) / peer.seconds)
            if peer is not None and system != "peer" and tps else None,
            same=None if ref is None or system == ref_name else len(batch) - len(diff),
            load=run.load, **(run.xla or {}),
            note=notes.get(system, "") + ("; errors: " + run.errors[0] if run.errors else "")))
      for label, why in notes.items():
        if label not in systems:
          rows.append(dict(set=set_name, lanes=lanes, system=label, prompts=len(batch),
                           tokens=0, tokens_per_s=None, ms_per_token=None, floor_ratio=None,
                           accepted_length=None, vs_peer=None, same=None, load=None,
                           note=why))
  return dict(rows=rows, mismatches=mismatches)


if __name__ == "__main__":
  sys.exit(main())
