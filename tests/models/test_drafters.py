"""Drafter networks vs independent oracles: greedy continuation of the draft model's full
forward, and an FP64 numpy implementation of the MTP and DFlash heads, over two rounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import drafters as dr
from infernix_jax.pallas import DenseQ, OneHotQ, SparseQ
from tests.models import _np_oracle as orc

V, K, B = 61, 3, 2
TARGET = im.ModelConfig(vocab_size=V, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                        head_dim=8, ffn_dim=48, qk_norm=True, tie_embeddings=False)
PROMPTS = [[5, 17, 2, 40, 33], [8, 8, 21]]
# Round 2 context: row 0 accepted 1 draft + a correction, row 1 all K drafts + a bonus.
CORRECTION, BONUS = 7, 9


def _randomize(module, seed, scale=0.35):
  """Large random weights (well separated argmaxes); returns the pure f64 parameter dict."""
  graphdef, state = nnx.split(module)
  rng = np.random.default_rng(seed)

  def draw(path, x):
    name = str(path[-1].key if hasattr(path[-1], "key") else path[-1])
    if name.endswith("norm"):
      return 1.0 + 0.1 * rng.normal(size=x.shape)
    return (1.0 if name in ("embed", "mask_embed") else scale) * rng.normal(size=x.shape)

  pure = jax.tree_util.tree_map_with_path(draw, nnx.to_pure_dict(state))
  nnx.replace_by_pure_dict(state, jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), pure))
  return nnx.merge(graphdef, state), pure


@pytest.fixture(scope="module")
def target():
  model, pure = _randomize(im.Transformer(TARGET, rngs=nnx.Rngs(0)), seed=1)
  return model, dr.TargetHead.from_model(model), pure


def _context(rows, hidden=None, dim=TARGET.dim):
  c = max(map(len, rows))
  tokens = np.zeros((B, c), np.int32)
  for b, r in enumerate(rows):
    tokens[b, :len(r)] = r
  if hidden is None:
    hidden = np.zeros((B, c, dim), np.float32)
  return dr.DraftContext(jnp.asarray(tokens), jnp.asarray(hidden, jnp.float32),
                         jnp.asarray([len(r) for r in rows], jnp.int32))


def _round2(ids1):
  return [[int(ids1[0, 0]), CORRECTION], [*map(int, ids1[1]), BONUS]]


def _last_logits(graphdef, state, prefix):
  """Full-forward logits after prefix (padded to one length: one compile for all calls)."""
  padded = np.zeros((1, 16), np.int32)
  padded[0, :len(prefix)] = prefix
  logits, _ = im.forward(graphdef, state, jnp.asarray(padded))
  return np.asarray(logits[0, len(prefix) - 1], np.float64)


def _greedy(graphdef, state, prefix, k):
  seq = list(prefix)
  for _ in range(k):
    seq.append(int(np.argmax(_last_logits(graphdef, state, seq))))
  return seq[len(prefix):]


def test_draft_model_greedy_two_rounds():
  draft, _ = _randomize(im.Transformer(TARGET.replace(num_layers=1), rngs=nnx.Rngs(2)), 3)
  drafter = dr.DraftModelDrafter.from_model(draft, k=K)
  graphdef, state = nnx.split(draft)
  dstate = drafter.init_state(B, 32)
  ids1, q, dstate = drafter.propose(dstate, _context(PROMPTS))
  assert isinstance(q, OneHotQ) and ids1.shape == (B, K) and ids1.dtype == jnp.int32
  np.testing.assert_array_equal(dstate.lengths, [5, 3])
  for b in range(B):
    assert list(ids1[b]) == _greedy(graphdef, state, PROMPTS[b], K)
  ctx2 = _round2(np.asarray(ids1))
  ids2, _, dstate = drafter.propose(dstate, _context(ctx2))
  np.testing.assert_array_equal(dstate.lengths, [7, 7])
  for b in range(B):
    assert list(ids2[b]) == _greedy(graphdef, state, PROMPTS[b] + ctx2[b], K)


def test_draft_model_sampling_returns_the_dense_q_it_sampled_from():
  draft, _ = _randomize(im.Transformer(TARGET.replace(num_layers=1), rngs=nnx.Rngs(2)), 4)
  drafter = dr.DraftModelDrafter.from_model(draft, k=K, temperature=0.8, target_width=64)
  graphdef, state = nnx.split(draft)
  keys = jax.random.split(jax.random.key(0), B)
  ids, q, _ = drafter.propose(drafter.init_state(B, 32), _context(PROMPTS), keys)
  again, _, _ = drafter.propose(drafter.init_state(B, 32), _context(PROMPTS), keys)
  np.testing.assert_array_equal(ids, again)  # randomness only from the keys
  assert isinstance(q, DenseQ) and q.probs.shape == (B, K, 64)
  probs = np.asarray(q.probs)
  np.testing.assert_array_equal(probs[..., V:], 0.0)
  for b in range(B):
    for i in range(K):
      prefix = PROMPTS[b] + [int(t) for t in ids[b, :i]]
      expected = jax.nn.softmax(_last_logits(graphdef, state, prefix) / 0.8)
      np.testing.assert_allclose(probs[b, i, :V], expected, atol=1e-5)
      assert probs[b, i, ids[b, i]] > 0


def test_mtp_matches_fp64_oracle_two_rounds(target):
  model, head, tpure = target
  mtp, pure = _randomize(dr.MTPHead(TARGET, rngs=nnx.Rngs(5)), seed=6)
  drafter = dr.MTPDrafter.create(mtp, head, k=K)
  rng = np.random.default_rng(7)
  hidden1 = rng.normal(size=(B, 5, TARGET.dim))
  ids1, q, dstate = drafter.propose(drafter.init_state(B, 32), _context(PROMPTS, hidden1))
  assert isinstance(q, OneHotQ)
  ctx2 = _round2(np.asarray(ids1))
  hidden2 = rng.normal(size=(B, 4, TARGET.dim))
  ids2, _, dstate = drafter.propose(dstate, _context(ctx2, hidden2))
  embed, lm_head = np.asarray(tpure["embed"]), np.asarray(tpure["lm_head"])
  for b in range(B):
    n1, n2 = len(PROMPTS[b]), len(ctx2[b])
    assert list(ids1[b]) == orc.mtp_greedy(TARGET, pure, embed, lm_head, hidden1[b, :n1],
                                           PROMPTS[b], K)
    hidden = np.concatenate([hidden1[b, :n1], hidden2[b, :n2]])
    assert list(ids2[b]) == orc.mtp_greedy(TARGET, pure, embed, lm_head, hidden,
                                           PROMPTS[b] + ctx2[b], K)
  np.testing.assert_array_equal(dstate.lengths, [7, 7])


def _dflash(target, sparse):
  _, head, tpure = target
  cfg = TARGET.replace(num_layers=2)
  net, pure = _randomize(dr.DFlashNet(cfg, feature_dim=2 * TARGET.dim, rngs=nnx.Rngs(8)), 9)
  drafter = dr.DFlashDrafter.create(net, head, k=K, sparse=sparse, temperature=0.7)
  return drafter, cfg, pure, np.asarray(tpure["embed"]), np.asarray(tpure["lm_head"])


def _dflash_rounds(drafter, keys=None):
  rng = np.random.default_rng(10)
  feats1 = rng.normal(size=(B, 5, 2 * TARGET.dim))
  ids1, q1, dstate = drafter.propose(drafter.init_state(B, 32), _context(PROMPTS, feats1), keys)
  ctx2 = _round2(np.asarray(ids1))
  feats2 = rng.normal(size=(B, 4, 2 * TARGET.dim))
  ids2, q2, dstate = drafter.propose(dstate, _context(ctx2, feats2), keys)
  full = [np.concatenate([feats1[b, :len(PROMPTS[b])], feats2[b, :len(ctx2[b])]])
          for b in range(B)]
  anchors2 = [ctx2[b][-1] for b in range(B)]
  return (ids1, q1, [feats1[b, :len(PROMPTS[b])] for b in range(B)],
          [p[-1] for p in PROMPTS]), (ids2, q2, full, anchors2), dstate


def test_dflash_block_matches_fp64_oracle_two_rounds(target):
  drafter, cfg, pure, embed, lm_head = _dflash(target, sparse=False)
  rounds = _dflash_rounds(drafter)
  for ids, q, feats, anchors in rounds[:2]:
    assert isinstance(q, OneHotQ)
    for b in range(B):
      logits = orc.dflash_logits(cfg, pure, embed, lm_head, feats[b], anchors[b], K)
      assert list(ids[b]) == list(np.argmax(logits, axis=-1))
  np.testing.assert_array_equal(rounds[2].lengths, [7, 7])


def test_dflash_sparse_q_is_top16_of_the_oracle(target):
  drafter, cfg, pure, embed, lm_head = _dflash(target, sparse=True)
  keys = jax.random.split(jax.random.key(1), B)
  for ids, q, feats, anchors in _dflash_rounds(drafter, keys)[:2]:
    assert isinstance(q, SparseQ) and q.ids.shape == (B, K, 16) and q.probs.shape == (B, K, 16)
    for b in range(B):
      logits = orc.dflash_logits(cfg, pure, embed, lm_head, feats[b], anchors[b], K) / 0.7
      for i in range(K):
        top = np.argsort(-logits[i], kind="stable")[:16]
        np.testing.assert_array_equal(np.asarray(q.ids[b, i]), top)
        expected = np.exp(logits[i, top] - logits[i, top].max())
        np.testing.assert_allclose(q.probs[b, i], expected / expected.sum(), atol=1e-5)
        assert int(ids[b, i]) in top


def test_drafter_weights_round_trip_through_orbax(tmp_path, target):
  _, head, _ = target
  mtp, _ = _randomize(dr.MTPHead(TARGET, rngs=nnx.Rngs(5)), seed=11)
  im.save_params(tmp_path / "mtp", mtp)
  restored = im.restore_params(tmp_path / "mtp", lambda: dr.MTPHead(TARGET, rngs=nnx.Rngs(0)))
  ctx = _context(PROMPTS, np.random.default_rng(0).normal(size=(B, 5, TARGET.dim)))
  a = dr.MTPDrafter.create(mtp, head, K)
  b = dr.MTPDrafter.create(restored, head, K)
  np.testing.assert_array_equal(a.propose(a.init_state(B, 16), ctx)[0],
                                b.propose(b.init_state(B, 16), ctx)[0])
