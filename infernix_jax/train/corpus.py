"""Self-distillation corpus: the frozen target's own continuations, cached on disk.

`build_corpus` frames every prompt of the mix with the model's chat template and generates
through our engine (exact speculative decoding with grammar jump-forward drafts, so the
tokens are the target's own), greedy for even items and at temperature 0.7 for odd ones,
each with its constraint (or without, for the mix's unconstrained share). The corpus is a
pure function of (model, mix, seed): its cache key hashes all three, and a cached corpus
is reused as it is.

The teacher-scored corpus (`teacher_corpus`) takes these sequences as its self-generated
part and scores them with the rest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from flax import nnx

from infernix_jax.train.prompts import Prompt

SAMPLED_TEMPERATURE = 0.7


def cache_root() -> Path:
  """Where corpora are cached: $INFERNIX_JAX_CACHE/distill or ~/.cache/infernix_jax/distill."""
  base = os.environ.get("INFERNIX_JAX_CACHE") or Path.home() / ".cache" / "infernix_jax"
  return Path(base) / "distill"


@dataclasses.dataclass(frozen=True)
class Record:
  """One generated sequence.

  Attributes:
    name: the prompt's identity; family: its family; constrained: whether it was generated
    under its constraint; temperature: 0 (greedy) or SAMPLED_TEMPERATURE.
    ids: prompt + continuation token ids; prompt_len: where the continuation starts.
  """

  name: str
  family: str
  constrained: bool
  temperature: float
  ids: tuple[int, ...]
  prompt_len: int



TINY_RANDOM = "tiny-random"


def load_target(path=None, layout: str = "unrolled"):
  """The frozen target (a `runtime.build.Target`) and its identity string.

  Args:
    path: a model source (`models.load_model`); None: the embedded SmolLM2-135M-Instruct;
      "tiny-random": a random two-layer model with the embedded model's vocabulary and
      tokenizer (smoke runs: the whole pipeline in seconds, nothing learnable).
    layout: the model layout (unrolled decodes fastest on CPU).
  """
  from infernix_jax import models as im
  from infernix_jax.runtime import build
  if path == TINY_RANDOM:
    source = im.default_model_path()
    cfg = im.ModelConfig(vocab_size=49152, dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                         head_dim=16, ffn_dim=128, tie_embeddings=True)
    target = build.Target(cfg=cfg, model=im.Transformer(cfg, rngs=nnx.Rngs(0)),
                          vocab=build.vocabulary(source), tokenizer=im.load_tokenizer(source),
                          source=source, name=TINY_RANDOM)
  else:
    target = build.load_target(build.EngineSpec(model=str(path) if path else None,
                                                layout=layout))
  return target, model_identity(target.name, target.cfg)


def model_identity(name, cfg) -> str:
  """"<file name>:<dim>x<layers>:<vocab>": what a trained drafter is tied to."""
  return f"{name}:{cfg.dim}x{cfg.num_layers}:{cfg.vocab_size}"


def corpus_key(model_id: str, prompts: Sequence[Prompt], seed: int) -> str:
  """A stable hash of (model identity, prompts with their constraints and budgets, seed)."""
  h = hashlib.sha256(f"{model_id}|{seed}|{SAMPLED_TEMPERATURE}".encode())
  for p in prompts:
    h.update(json.dumps(dataclasses.asdict(p), sort_keys=True).encode())
  return h.hexdigest()[:16]


def constraint_of(p: Prompt):
  from infernix_jax import constrain as ic
  if p.constraint is None:
    return None
  kind, arg = p.constraint
  if kind == "json_schema":
    return ic.OutputConstraint.json_schema(arg)
  if kind == "choice":
    return ic.OutputConstraint.choice(arg)
  raise ValueError(f"unknown constraint kind {kind!r} in prompt {p.name!r}")


def framed_ids(tok, prompt: Prompt) -> list[int]:
  """The prompt as the CLI's --chat feeds it: the chat template with the assistant header."""
  from infernix_jax.chat_template import frame_prompt
  return list(tok.encode(frame_prompt(tok, prompt.text)))


def generate(target, prompts: Sequence[Prompt], *, seed: int, lanes: int = 4,
             capacity: int = 1024, compiler=None, log=sys.stderr
             ) -> tuple[list[Record], dict]:
  """Generates one continuation per prompt through the engine, all submitted at once
  (continuous batching). The drafter is grammar jump-forward alone: on this compute-bound
  CPU every verified token counts, and forced tokens are the only drafts never rejected.

  Args:
    target: the frozen target (`runtime.build.Target`).
    prompts: the mix.
    seed: sampling seed (item i samples with seed + i).
    lanes: engine lanes; capacity: per-lane KV capacity (longer prompts are skipped).
    compiler: a `constrain.ConstraintCompiler` of the target's vocabulary to share (None: a
      new one).

  Returns:
    (records, skipped {reason: count}).
  """
  from infernix_jax import constrain as ic
  from infernix_jax.progress import Progress
  from infernix_jax.runtime import GenerationRequest, SamplingOptions
  from infernix_jax.runtime.build import EngineSpec, build_engine
  built = build_engine(EngineSpec(drafter="jump", drafter_options={"k": 4}, lanes=lanes,
                                  capacity=capacity), target=target, compiler=compiler)
  engine, tok, vocab, compiler = built.engine, target.tokenizer, target.vocab, built.compiler
  skipped: dict[str, int] = {}

  def skip(why):
    skipped[why] = skipped.get(why, 0) + 1

  pending = {}
  for i, p in enumerate(prompts):
    ids = framed_ids(tok, p)
    if len(ids) + p.max_tokens + 2 * (engine.k + 1) > capacity:
      skip("longer than the capacity")
      continue
    try:
      constraint = constraint_of(p)
      if constraint is not None:
        compiler.compile(constraint)
    except ic.ConstraintError as e:
      skip(type(e).__name__)
      continue
    temperature = 0.0 if i % 2 == 0 else SAMPLED_TEMPERATURE
    rid = engine.submit(GenerationRequest(
        ids, max_tokens=p.max_tokens, constraint=constraint,
        sampling=SamplingOptions(temperature=temperature, seed=seed + i)))
    pending[rid] = (i, p, ids, temperature)
  bar = Progress(len(pending), "corpus", stream=log)
  done: dict[int, Record] = {}
  start, tokens, finished = time.perf_counter(), 0, 0
  while engine.busy:
    engine.step()
    for rid, r in [(rid, engine.result(rid)) for rid in list(pending)]:
      if r is None:  # still running
        continue
      i, p, ids, temperature = pending.pop(rid)
      finished += 1
      if r.error:
        skip(f"generation error ({r.error_kind})")
        continue
      out = list(r.token_ids)
      if r.finish_reason.value == "stop":
        out.append(min(vocab.eos_ids))
      done[i] = Record(p.name, p.family, p.constraint is not None, temperature,
                       tuple(ids) + tuple(out), len(ids))
      tokens += len(out)
    bar.update(finished, tokens=tokens, tok_s=tokens / max(time.perf_counter() - start, 1e-9))
  bar.close()
  return [done[i] for i in sorted(done)], skipped


def save(path: Path, records: Sequence[Record], meta: dict) -> None:
  path.mkdir(parents=True, exist_ok=True)
  tmp = path / "corpus.json.tmp"
  tmp.write_text(json.dumps({"meta": meta, "records": [dataclasses.asdict(r) for r in records]}))
  tmp.replace(path / "corpus.json")


def load(path: Path) -> tuple[list[Record], dict]:
  blob = json.loads((path / "corpus.json").read_text())
  records = [Record(**{**r, "ids": tuple(r["ids"])}) for r in blob["records"]]
  return records, blob["meta"]


def build_corpus(target, model_id: str, prompts: Sequence[Prompt], *, seed: int,
                 lanes: int = 4, root: Path | None = None, compiler=None, log=sys.stderr):
  """The cached corpus of (model, prompts, seed), generated on first use (`generate`).

  Returns:
    (records, meta, directory).
  """
  key = corpus_key(model_id, prompts, seed)
  directory = (root or cache_root()) / key
  if (directory / "corpus.json").exists():
    records, meta = load(directory)
    print(f"corpus: cached {directory} ({len(records)} sequences)", file=log, flush=True)
    return records, meta, directory
  start = time.perf_counter()
  records, skipped = generate(target, prompts, seed=seed, lanes=lanes, compiler=compiler,
                              log=log)
  meta = {"model": model_id, "seed": seed, "prompts": len(prompts), "skipped": skipped,
          "seconds": round(time.perf_counter() - start, 1),
          "continuation_tokens": sum(len(r.ids) - r.prompt_len for r in records)}
  save(directory, records, meta)
  return records, meta, directory
