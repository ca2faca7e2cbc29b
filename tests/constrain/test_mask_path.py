"""The session's mask paths against the public matcher call plus our two corrections.

Every path that writes a mask (lookahead with K=0 cached and uncached, draft chains,
fill_mask, preview's flags, the batch fill's [B*P, W] path, the terminated and probe-word
branches) must give the bits of xgrammar's public ``fill_next_token_bitmask`` on a fresh
matcher, with the bits past V cleared and the strict UTF-8 filter of the decoder state applied.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import _utf8, _xgr
from infernix_jax.constrain._masks import probe_words
from infernix_jax.mask_layout import DEAD_END, READY, UNREACHABLE
from tests.constrain.conftest import TOY_EOS, toy_vocab

SCHEMA = ('{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},'
          '"tags":{"type":"array","items":{"type":"string"}}},"required":["name"]}')


def reference(compiled, tokens) -> tuple[np.ndarray, bool]:
  """(corrected mask int32 [W], raw fill had spare bits set) after ``tokens``, from a fresh
  matcher through the library's public method; all zero once EOS was accepted."""
  vocab = compiled.vocab
  m = _xgr.new_matcher(compiled._entry.grammar)
  for t in tokens:
    assert m.accept_token(t)
  buf = np.zeros((1, vocab.mask_words), np.int32)
  if m.is_terminated():
    return buf[0], False
  m.fill_next_token_bitmask(buf, 0)
  spare = bool(mask_layout.unpack(buf, vocab.mask_words * 32)[0, vocab.size:].any())
  mask_layout.clear_spare_bits(buf, vocab.size)
  text = b"".join(vocab.token_bytes[t] for t in tokens)
  state, bad = _utf8.advance(_utf8.CLEAN, text)
  assert bad < 0
  _utf8.tables(vocab).filter(buf[0], state)
  return buf[0], spare


def walk_states(compiled, rng: random.Random, n_walks: int, steps: int) -> list[list[int]]:
  """Token prefixes of random walks that favour partial-UTF-8 tokens (pending decoder states)."""
  vocab = compiled.vocab
  partial = [i for i, b in enumerate(vocab.token_bytes) if vocab.token_class[i] == 0 and b
             and not _is_text(b)]
  prefixes = []
  for _ in range(n_walks):
    toks: list[int] = []
    for _ in range(steps):
      prefixes.append(list(toks))
      allowed = mask_layout.unpack(reference(compiled, toks)[0], vocab.size)
      ids = np.flatnonzero(allowed)
      part = [t for t in partial if allowed[t]]
      if ids.size == 0:
        break
      t = rng.choice(part) if part and rng.random() < 0.6 else int(ids[rng.randrange(ids.size)])
      toks.append(t)
      if t in vocab.eos_ids:
        prefixes.append(list(toks))
        break
  return prefixes


def _is_text(b: bytes) -> bool:
  try:
    b.decode("utf-8")
  except UnicodeDecodeError:
    return False
  return True


# A JSON schema (strings reach pending UTF-8 states) and a regex whose legal set is every
# ordinary token (the library then sets the bits past V, which we clear).
CONSTRAINTS = {"json": ic.OutputConstraint.json_schema(SCHEMA),
               "regex": ic.OutputConstraint.regex(".{1,8}")}


@pytest.fixture(scope="module", params=sorted(CONSTRAINTS))
def walked(qwen3_vocab, request):
  """(constraint name, compiled, walk prefixes, their `reference` masks)."""
  # This module checks our xgrammar mask path against raw xgrammar calls.
  compiled = ic.ConstraintCompiler(qwen3_vocab).compile(CONSTRAINTS[request.param],
                                                        backend="xgrammar")
  prefixes = walk_states(compiled, random.Random(0), n_walks=3, steps=12)
  return request.param, compiled, prefixes, [reference(compiled, p) for p in prefixes]


def _session(compiled, prefix, cached: bool):
  s = compiled.new_session()
  s.accept(prefix)
  if not cached:
    s.set_frontier(None)  # what a new session holds: no committed mask yet
  return s


@pytest.mark.parametrize("cached", [False, True])
def test_one_mask_equals_the_public_call(walked, cached):
  name, compiled, prefixes, refs = walked
  w = compiled.vocab.mask_words
  out = np.full((1, w), -1, np.int32)
  one = np.full(w, -1, np.int32)
  pending = spare = 0
  for prefix, (ref, raw_spare) in zip(prefixes, refs):
    s = _session(compiled, prefix, cached)
    pending += _utf8.pending(s._u8)
    spare += raw_spare
    states = s.lookahead([], out)
    assert np.array_equal(out[0], ref), prefix
    want = UNREACHABLE if s.terminated else READY if ref.any() else DEAD_END
    assert list(states) == [want], prefix
    s = _session(compiled, prefix, cached)
    assert s.fill_mask(one) == bool(ref.any()) and np.array_equal(one, ref), prefix
    assert s.lookahead((), out)[0] == want and np.array_equal(out[0], ref)  # now cached
  assert pending  # the UTF-8 filter was exercised
  assert spare or name != "regex"  # and the spare-bit clearing


@pytest.mark.parametrize("cached", [False, True])
def test_draft_chains_equal_the_public_call(walked, cached):
  _, compiled, prefixes, refs = walked
  w = compiled.vocab.mask_words
  by_prefix = {tuple(p): r for p, (r, _) in zip(prefixes, refs)}
  out = np.full((4, w), -1, np.int32)
  checked = 0
  for prefix in prefixes:
    longer = [p for p in prefixes if len(p) == len(prefix) + 3 and p[:len(prefix)] == prefix]
    if not longer:
      continue
    chain = longer[0][len(prefix):]
    states = _session(compiled, prefix, cached).lookahead(chain, out)
    for i in range(4):
      ref = by_prefix[tuple(prefix + chain[:i])]
      if states[i] == UNREACHABLE:
        assert not out[i].any()
        continue
      assert np.array_equal(out[i], ref), (prefix, i)
      checked += 1
  assert checked > 20


@pytest.mark.parametrize("cached", [False, True])
def test_batch_rows_equal_the_public_call(walked, cached):
  _, compiled, prefixes, refs = walked
  w = compiled.vocab.mask_words
  by_prefix = {tuple(p): r for p, (r, _) in zip(prefixes, refs)}
  rows = [p for p in prefixes
          if any(len(q) == len(p) + 2 and q[:len(p)] == p for q in prefixes)][:6]
  chains = [next(q for q in prefixes if len(q) == len(p) + 2 and q[:len(p)] == p)[len(p):]
            for p in rows]
  sessions = [_session(compiled, p, cached) for p in rows] + [None]
  drafts = np.array(chains + [[0, 0]], np.int32)
  n_drafts = np.array([2, 1, 0, 2, 1, 0, 2][:len(sessions)])
  out = np.full((len(sessions), 3, w), -1, np.int32)
  states, enabled = ic.fill_batch(sessions, drafts, n_drafts, out)
  assert list(enabled) == [s is not None for s in sessions]
  assert (out[-1] == -1).all() and (states[-1] == READY).all()  # the None row: untouched
  for b, p in enumerate(rows):
    n = int(n_drafts[b])
    for i in range(n + 1):
      assert np.array_equal(out[b, i], by_prefix[tuple(p + chains[b][:i])]), (b, i)
    assert (states[b, n + 1:] == UNREACHABLE).all() and not out[b, n + 1:].any()
    single = np.zeros((n + 1, w), np.int32)
    assert np.array_equal(_session(compiled, p, cached).lookahead(chains[b][:n], single),
                          states[b, :n + 1])


def test_preview_flags_follow_the_corrected_mask(walked):
  _, compiled, prefixes, refs = walked
  by_prefix = {tuple(p): r for p, (r, _) in zip(prefixes, refs)}
  eos = compiled.vocab.eos_ids
  for p in prefixes:
    if not p or tuple(p[:-1]) not in by_prefix:
      continue
    s = compiled.new_session()
    s.accept(p[:-1])
    r = s.preview(p[-1:])
    ref = by_prefix[tuple(p)]
    assert r.accepted == 1
    assert r.complete == (r.terminated or any(mask_layout.bit(ref, e) for e in eos))
    assert r.dead_end == (not r.terminated and not ref.any())


def test_probe_words_then_a_full_count(qwen3_vocab):
  """A legal set without single-byte ASCII tokens (the probe words) is still Ready."""
  assert probe_words(qwen3_vocab) == (0, 1, 2)
  compiled = ic.ConstraintCompiler(qwen3_vocab).compile(
      ic.OutputConstraint.choice(["日本", "中文"]), backend="xgrammar")
  w = qwen3_vocab.mask_words
  for cached in (False, True):
    s = _session(compiled, [], cached)
    out = np.zeros((1, w), np.int32)
    assert list(s.lookahead([], out)) == [READY]
    assert not out[0, :3].any() and out.any()
    batch = np.zeros((2, 1, w), np.int32)
    states, _ = ic.fill_batch([_session(compiled, [], cached), None], np.zeros((2, 0), np.int32),
                              [0, 0], batch)
    assert states[0, 0] == READY and np.array_equal(batch[0], out)


def test_terminated_and_dead_end_one_mask():
  vocab = toy_vocab()
  compiled = ic.ConstraintCompiler(vocab).compile(ic.OutputConstraint.choice(["ab", "bq"]))
  for cached in (False, True):  # uncached: the library refuses to fill, we report Unreachable
    s = _session(compiled, [5, TOY_EOS], cached)
    out = np.full((2, 1), -1, np.int32)
    assert list(s.lookahead([], out)) == [UNREACHABLE] and out[0, 0] == 0 and out[1, 0] == -1
    out[:] = -1
    assert list(s.lookahead([2], out)) == [UNREACHABLE, UNREACHABLE] and not out.any()
    batch = np.full((1, 2, 1), -1, np.int32)
    states, _ = ic.fill_batch([s], np.array([[2]], np.int32), [1], batch)
    assert list(states[0]) == [UNREACHABLE, UNREACHABLE] and not batch.any()
    one = np.full(1, -1, np.int32)
    assert not _session(compiled, [5, TOY_EOS], cached).fill_mask(one) and one[0] == 0
    s = _session(compiled, [3], cached)  # "b": no token spells "q"
    out = np.full((1, 1), -1, np.int32)
    assert list(s.lookahead([], out)) == [DEAD_END] and out[0, 0] == 0


def test_buffers_off_the_fast_check():
  """Buffers the one-expression check refuses go through `_xgr.check_buffer`."""
  s = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.choice(["a"])).new_session()

  class Sub(np.ndarray):
    pass

  want = np.zeros((1, 1), np.int32)
  s.lookahead([], want)
  sub = np.zeros((1, 1), np.int32).view(Sub)
  assert list(s.lookahead([], sub)) == [READY] and np.array_equal(sub, want)
  frozen = np.zeros((1, 1), np.int32)
  frozen.flags.writeable = False
  with pytest.raises(ValueError):
    s.lookahead([], frozen)


def test_matcher_calls_without_the_ffi_object(qwen3_vocab):
  """The public-method fallback of `_xgr.matcher_calls` fills and walks the same."""
  compiled = ic.ConstraintCompiler(qwen3_vocab).compile(ic.OutputConstraint.json_schema(SCHEMA),
                                                        backend="xgrammar")
  direct = _xgr.matcher_calls(_xgr.new_matcher(compiled._entry.grammar))
  m = _xgr.new_matcher(compiled._entry.grammar)
  public = _xgr.matcher_calls(types.SimpleNamespace(
      fill_next_token_bitmask=m.fill_next_token_bitmask, accept_token=m.accept_token,
      rollback=m.rollback, is_terminated=m.is_terminated))
  w = qwen3_vocab.mask_words
  a, b = np.zeros((2, w), np.int32), np.zeros((2, w), np.int32)
  brace = qwen3_vocab.token_id("{")
  for calls, buf in ((direct, a), (public, b)):
    calls.fill(buf, 0, False)
    assert calls.accept_token(brace, False) and not calls.is_terminated()
    calls.fill(buf, 1, False)
    calls.rollback(1)
  assert np.array_equal(a, b) and a[0].any() and a[1].any()
