"""Cached phases agree with the full forward: prefill, decode, verify, rollback, chunking."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im

CFG = im.ModelConfig(vocab_size=97, dim=48, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=16, ffn_dim=80, rope_theta=10_000.0, qk_norm=True,
                     tie_embeddings=False, name="tiny-qwen3")
ATOL = 1e-5


@pytest.fixture(scope="module")
def split():
  return nnx.split(im.Transformer(CFG, rngs=nnx.Rngs(3)))


def _tokens(b, t, seed=0):
  return np.random.default_rng(seed).integers(0, CFG.vocab_size, size=(b, t)).astype(np.int32)


def test_prefill_then_decode_equals_forward(split):
  graphdef, state = split
  seq = _tokens(2, 12)
  full_logits, full_hidden = im.forward(graphdef, state, jnp.asarray(seq))
  cache = im.KVCache.init(CFG, batch=2, capacity=16)
  lengths = np.array([5, 8], np.int32)  # per-row prompt lengths, right padded
  padded = np.where(np.arange(8) < lengths[:, None], seq[:, :8], 0)
  logits, hidden, cache = im.prefill(graphdef, state, cache, padded, lengths)
  np.testing.assert_array_equal(cache.lengths, lengths)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(logits[b], full_logits[b, n - 1], atol=ATOL)
    np.testing.assert_allclose(hidden[b, :n], full_hidden[b, :n], atol=ATOL)
  pos = lengths.copy()
  for _ in range(3):  # each row continues at its own offset
    logits, hidden, cache = im.decode(graphdef, state, cache, jnp.asarray(seq[[0, 1], pos]))
    for b in range(2):
      np.testing.assert_allclose(logits[b], full_logits[b, pos[b]], atol=ATOL)
      np.testing.assert_allclose(hidden[b], full_hidden[b, pos[b]], atol=ATOL)
    pos += 1
  np.testing.assert_array_equal(cache.lengths, pos)


def test_chunked_prefill_equals_one_chunk(split):
  graphdef, state = split
  seq = _tokens(2, 11, seed=1)
  lengths = np.array([11, 6], np.int32)
  one = im.prefill(graphdef, state, im.KVCache.init(CFG, 2, 16), seq, lengths)
  many = im.prefill(graphdef, state, im.KVCache.init(CFG, 2, 16), seq, lengths, chunk=4)
  np.testing.assert_allclose(one[0], many[0], atol=ATOL)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(one[1][b, :n], many[1][b, :n], atol=ATOL)
    np.testing.assert_allclose(one[2].k[:, b, :n], many[2].k[:, b, :n], atol=ATOL)
  np.testing.assert_array_equal(many[2].lengths, lengths)


def test_verify_equals_sequential_decodes_and_rollback(split):
  graphdef, state = split
  seq = _tokens(2, 9, seed=2)
  drafts = _tokens(2, 5, seed=3)  # P = 5: anchor + 4 drafts
  lengths = np.array([4, 2], np.int32)

  def fresh():
    cache = im.KVCache.init(CFG, 2, 16)
    return im.prefill(graphdef, state, cache, seq[:, :4], lengths)[2]

  v_logits, v_hidden, cache = im.verify(graphdef, state, fresh(), jnp.asarray(drafts))
  assert v_logits.shape == (2, 5, CFG.vocab_size) and v_hidden.shape == (2, 5, CFG.dim)
  np.testing.assert_array_equal(cache.lengths, lengths)  # verify never commits

  seq_cache = fresh()
  for p in range(5):
    logits, hidden, seq_cache = im.decode(graphdef, state, seq_cache, jnp.asarray(drafts[:, p]))
    np.testing.assert_allclose(v_logits[:, p], logits, atol=ATOL)
    np.testing.assert_allclose(v_hidden[:, p], hidden, atol=ATOL)

  # Rollback: verify other drafts at the same offsets, then the first ones again.
  other = (drafts + 1) % CFG.vocab_size
  o_logits, _, cache = im.verify(graphdef, state, cache, jnp.asarray(other))
  assert np.abs(np.asarray(o_logits) - np.asarray(v_logits)).max() > 1e-3
  again, _, cache = im.verify(graphdef, state, cache, jnp.asarray(drafts))
  np.testing.assert_allclose(again, v_logits, atol=ATOL)

  # Commit two drafts of row 0 and none of row 1; the next verify continues from there.
  cache = cache.with_lengths(lengths + np.array([2, 0]))
  nxt, _, _ = im.verify(graphdef, state, cache, jnp.asarray(drafts[:, 2:4]))
  np.testing.assert_allclose(nxt[0], v_logits[0, 2:4], atol=ATOL)
  full, _ = im.forward(graphdef, state, jnp.asarray(np.concatenate([seq[1:, :2], drafts[1:, 2:4]],
                                                                   axis=1)))
  np.testing.assert_allclose(nxt[1], full[0, 2:4], atol=ATOL)


def test_with_lengths_checks_shape():
  cache = im.KVCache.init(CFG, batch=2, capacity=4)
  assert cache.k.shape == (2, 2, 4, 2, 16) and cache.capacity == 4 and cache.batch == 2
  with pytest.raises(ValueError, match="shape"):
    cache.with_lengths(np.zeros(3, np.int32))


def test_bf16_model_runs_close_to_f32(split):
  graphdef, state = split
  pure = jax.tree.map(lambda x: x.astype(jnp.bfloat16), nnx.to_pure_dict(state))
  g16, s16 = nnx.split(im.Transformer(CFG.replace(dtype="bfloat16"), rngs=nnx.Rngs(0)))
  nnx.replace_by_pure_dict(s16, pure)
  seq = jnp.asarray(_tokens(1, 6, seed=4))
  ref, _ = im.forward(graphdef, state, seq)
  out, hidden = im.forward(g16, s16, seq)
  assert hidden.dtype == jnp.bfloat16 and out.dtype == jnp.float32
  assert np.abs(np.asarray(out) - np.asarray(ref)).max() < 0.05 * np.abs(np.asarray(ref)).max()


def test_feature_taps(split):
  """taps concatenate chosen layers' outputs; layer 0's equals a 1-layer model's output."""
  graphdef, state = split
  seq = _tokens(2, 7, seed=5)
  lengths = np.array([7, 4], np.int32)
  base = im.prefill(graphdef, state, im.KVCache.init(CFG, 2, 16), seq, lengths)
  tapped = im.prefill(graphdef, state, im.KVCache.init(CFG, 2, 16), seq, lengths, taps=(0, 1))
  assert tapped[1].shape == (2, 7, 2 * CFG.dim)
  np.testing.assert_allclose(tapped[0], base[0], atol=ATOL)
  np.testing.assert_allclose(tapped[1][..., CFG.dim:], base[1], atol=ATOL)
  pure = nnx.to_pure_dict(state)
  pure["layers"] = jax.tree.map(lambda x: x[:1], pure["layers"])
  g1, s1 = nnx.split(im.Transformer(CFG.replace(num_layers=1), rngs=nnx.Rngs(0)))
  nnx.replace_by_pure_dict(s1, pure)
  _, first = im.forward(g1, s1, jnp.asarray(seq))
  np.testing.assert_allclose(tapped[1][0, :, :CFG.dim], first[0], atol=ATOL)

  cache = base[2]
  drafts = jnp.asarray(_tokens(2, 3, seed=6))
  logits, hidden, cache = im.verify(graphdef, state, cache, drafts)
  t_logits, t_hidden, cache = im.verify(graphdef, state, cache, drafts, taps=(1, 0))
  np.testing.assert_allclose(t_logits, logits, atol=ATOL)
  np.testing.assert_allclose(t_hidden[..., :CFG.dim], hidden, atol=ATOL)
  with pytest.raises(ValueError, match="tap 2"):
    im.verify(graphdef, state, cache, drafts, taps=(2,))


def test_attention_span_equals_whole_capacity(split):
  """Attending over the first `span` positions gives the full-capacity results whenever every
  row's positions fit in the span."""
  graphdef, state = split
  seq = _tokens(2, 12, seed=4)
  lengths = np.array([5, 8], np.int32)
  outs = []
  for span in (None, 12):
    cache = im.KVCache.init(CFG, batch=2, capacity=24)
    _, _, cache = im.prefill(graphdef, state, cache, seq[:, :8], lengths)
    v_logits, _, cache = im.verify(graphdef, state, cache, seq[:, 8:11], span=span)
    d_logits, _, cache = im.decode(graphdef, state, cache, jnp.asarray(seq[:, 11]), span=span)
    outs.append((np.asarray(v_logits), np.asarray(d_logits)))
  for want, got in zip(*outs):
    np.testing.assert_allclose(got, want, atol=ATOL)


@pytest.mark.parametrize("layout", ["stacked", "unrolled"])
def test_tree_verify_scores_every_root_path_like_the_full_forward(split, layout):
  """One tree-attention call over a token tree gives, at each node, the full causal forward's
  logits after prompt + that node's root path (the oracle runs each path separately)."""
  from infernix_jax.models import unrolled
  graphdef, state = split
  if layout == "unrolled":
    graphdef, state = nnx.split(unrolled.unroll(nnx.merge(graphdef, state)))
  prompt = _tokens(1, 6, seed=4)[0]
  # The tree below the anchor (prompt[-1]), as (parent index, token); index 0 is the anchor.
  # Siblings share a token (7) on purpose: only the mask tells them apart.
  nodes = [(-1, int(prompt[-1])), (0, 7), (0, 9), (1, 7), (1, 3), (3, 11), (2, 7), (6, 5)]
  t = 16  # padded like the callers do
  tokens = np.zeros((1, t), np.int32)
  depth = np.zeros((1, t), np.int32)
  anc = np.zeros((1, t, t), bool)
  anc[0, np.arange(t), np.arange(t)] = True
  paths = []
  for i, (parent, tok) in enumerate(nodes):
    tokens[0, i] = tok
    if parent >= 0:
      depth[0, i] = depth[0, parent] + 1
      anc[0, i] |= anc[0, parent]
      paths.append(paths[parent] + [tok])
    else:
      paths.append([])
  cache = im.KVCache.init(CFG, batch=1, capacity=32)
  _, _, cache = im.prefill(graphdef, state, cache, prompt[None, :-1], np.asarray([5], np.int32))
  logits, cache = im.tree_verify(graphdef, state, cache, jnp.asarray(tokens),
                                 jnp.asarray(depth), jnp.asarray(anc))
  np.testing.assert_array_equal(cache.lengths, [5])  # scratch slots only
  for i, path in enumerate(paths):
    seq = np.asarray([list(prompt) + path], np.int32)
    want, _ = im.forward(graphdef, state, jnp.asarray(seq))
    np.testing.assert_allclose(np.asarray(logits[0, i]), np.asarray(want[0, -1]), atol=ATOL)


def _full_cache_copies(hlo: str, shape: str) -> int:
  """Instructions of the compiled entry computation that copy a whole cache array."""
  entry = hlo[hlo.index("\nENTRY"):]
  in_place = ("dynamic-update-slice", "scatter")  # update the aliased operand's buffer
  return sum(1 for line in entry.splitlines()
             if f"= f32[{shape}]" in line and (" copy(" in line or "kind=kLoop" in line
                                              and not any(op in line for op in in_place)))


@pytest.mark.parametrize("layout", ["stacked", "unrolled"])
def test_verify_updates_the_cache_in_place(split, layout):
  """A verify step's cache write is an in-place window update: the compiled step holds no
  instruction that copies or rewrites the whole [L, B, S, G, H] cache, so a step's cost
  does not grow with the capacity (only with its attention span)."""
  from infernix_jax.models import unrolled
  model = nnx.merge(*split)
  if layout == "unrolled":
    model = unrolled.unroll(model)
  graphdef, state = nnx.split(model)
  cache = im.KVCache.init(CFG, batch=2, capacity=1024).with_lengths(np.array([7, 30]))
  tokens = jnp.asarray(_tokens(2, 5))
  hlo = im.verify.lower(graphdef, state, cache, tokens, span=64).compile().as_text()
  shape = f"{CFG.num_layers},2,1024,{CFG.num_kv_heads},{CFG.head_dim}"
  assert f"f32[{shape}]" in hlo
  assert _full_cache_copies(hlo, shape) == 0


def test_writes_past_the_capacity_are_dropped(split):
  """Slots >= S are dropped, and the window write keeps every other entry as it was, for
  rows near, at and past the end of the capacity (verify scratch of the last positions)."""
  graphdef, state = split
  s, p = 12, 4
  shape = (CFG.num_layers, 3, s, CFG.num_kv_heads, CFG.head_dim)
  before = np.random.default_rng(5).normal(size=shape).astype(np.float32)
  lengths = np.asarray([3, 10, 12], np.int32)  # a fresh device array per (donating) call
  tokens = jnp.asarray(_tokens(3, p))
  out = im.verify(graphdef, state, im.KVCache(k=jnp.asarray(before), v=jnp.asarray(before + 1),
                                              lengths=jnp.asarray(lengths)), tokens)[2]
  zeros = jnp.zeros(shape, jnp.float32)
  fresh = im.verify(graphdef, state,
                    im.KVCache(k=zeros, v=zeros + 1, lengths=jnp.asarray(lengths)), tokens)[2]
  after = np.asarray(out.k)
  for row, start in enumerate([3, 10, 12]):
    written = [slot for slot in range(start, start + p) if slot < s]
    kept = [slot for slot in range(s) if slot not in written]
    np.testing.assert_array_equal(after[:, row, kept], before[:, row, kept])
    # layer 0's new keys depend on the tokens alone, not on what the cache held
    np.testing.assert_allclose(after[0, row, written], np.asarray(fresh.k)[0, row, written],
                               atol=ATOL)

