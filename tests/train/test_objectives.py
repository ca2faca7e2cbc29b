"""The training layouts reproduce inference: the student logits the objectives train are the
ones `propose` drafts from (MTP chain with the true tokens = the drafts; block queries), on a
tiny random target; and the loss terms against an FP64 numpy KL / CE."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import drafters as dr
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.train import objectives
from tests.models.test_drafters import _randomize

V, K = 61, 4
CFG = im.ModelConfig(vocab_size=V, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=8, ffn_dim=48, qk_norm=False, tie_embeddings=True)
PROMPT = [5, 17, 2, 40, 33, 8, 8, 21, 3]


def _random(make, seed):
  """`_randomize(make(), seed)` without initialising the module first (its initial values
  are all replaced: only their shapes count), which would run each initializer eagerly."""
  return _randomize(nnx.eval_shape(make), seed)


@pytest.fixture(scope="module")
def target():
  model, _ = _random(lambda: im.Transformer(CFG, rngs=nnx.Rngs(0)), 1)
  return model, dr.TargetHead.from_model(model)


def _compiled(fn, *args, **static):
  """fn(*args, **static) as one compiled program, as training runs it (inside its jitted
  step), not primitive by primitive: the array arguments (arrays, parameter dicts, heads) are
  traced, the rest (configs, sizes, weights of the loss) are fixed. Eager dispatch would
  compile each primitive of the layouts on its own."""
  traced = [i for i, a in enumerate(args)
            if isinstance(a, (jax.Array, np.ndarray, dict, dr.TargetHead))]

  def call(*xs):
    full = list(args)
    for i, x in zip(traced, xs):
      full[i] = x
    return fn(*full, **static)

  return jax.jit(call)(*[args[i] for i in traced])


FORWARD_LEN = 16  # every sequence's forward runs padded to this length: one compile


def _hidden(model, ids):
  """The target's hidden states [len(ids), D] of `ids` (the causal forward of `ids` padded
  to FORWARD_LEN: later positions do not change earlier ones)."""
  assert len(ids) <= FORWARD_LEN
  padded = np.zeros((1, FORWARD_LEN), np.int32)
  padded[0, :len(ids)] = ids
  _, hidden = im.forward(*nnx.split(model), jnp.asarray(padded))
  return np.asarray(hidden)[0, :len(ids)]


def _context(model, ids):
  """The prefill DraftContext of `ids`: hidden shifted right by one."""
  h = _hidden(model, ids)
  shifted = np.concatenate([np.zeros_like(h[:1]), h[:-1]], axis=0)
  return dr.DraftContext(tokens=jnp.asarray([ids], jnp.int32), hidden=jnp.asarray(shifted[None]),
                         counts=jnp.asarray([len(ids)], jnp.int32))


@pytest.mark.parametrize("kind", ["mtp", "block"])
def test_training_logits_equal_the_proposal(target, kind):
  model, head = target
  if kind == "mtp":
    net, _ = _random(lambda: dr.MTPHead(CFG, rngs=nnx.Rngs(2)), 3)
    drafter = dr.MTPDrafter.create(net, head, K)
  else:
    net, _ = _random(lambda: dr.DFlashNet(CFG.replace(num_layers=2), CFG.dim,
                                          rngs=nnx.Rngs(2)), 3)
    drafter = dr.DFlashDrafter.create(net, head, K)
  drafts, _, _ = drafter.propose(drafter.init_state(1, 64), _context(model, PROMPT))
  drafts = [int(t) for t in np.asarray(drafts[0])]
  ids = PROMPT + drafts  # the true continuation equals the drafts
  hidden = _hidden(model, ids)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  logits = _compiled(objectives.LOGITS[kind], params, net.cfg, head, jnp.asarray(ids), hidden,
                     jnp.asarray([len(PROMPT) - 1]), K)
  assert np.argmax(np.asarray(logits[0]), -1).tolist() == drafts
  # Logits gaps make the argmax check strict: the winners are well separated.
  top2 = np.sort(np.asarray(logits[0]), -1)[:, -2:]
  assert np.all(top2[:, 1] - top2[:, 0] > 1e-3)


def test_loss_terms_match_fp64(target):
  model, head = target
  net, _ = _random(lambda: dr.MTPHead(CFG, rngs=nnx.Rngs(4)), 5)
  ids = PROMPT + [11, 12, 13, 14, 15]
  hidden = _hidden(model, ids)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  anchors, ok = jnp.asarray([8, 10, 12]), jnp.asarray([True, True, False])
  n = len(ids)
  p_len = 11  # CE only on tokens 11.. (the "generated" part); KL everywhere
  loss, m = _compiled(objectives.distill_loss, "mtp", params, net.cfg, head,
                      model.final_norm[...], jnp.asarray(ids), hidden, n, p_len, anchors, ok,
                      k=K, ce_weight=0.5)
  student = np.asarray(_compiled(objectives.mtp_logits, params, net.cfg, head, jnp.asarray(ids),
                                 hidden, anchors, K), np.float64)
  teacher = np.asarray(jax.jit(model.logits)(hidden), np.float64)
  kls, ces = [], []
  for r, a in enumerate([8, 10]):
    for i in range(1, K + 1):
      if a + i >= n:
        continue
      lq = student[r, i - 1] - np.logaddexp.reduce(student[r, i - 1])
      lp = teacher[a + i - 1] - np.logaddexp.reduce(teacher[a + i - 1])
      kls.append(np.sum(np.exp(lp) * (lp - lq)))
      if a + i >= p_len:
        ces.append(-lq[ids[a + i]])
  np.testing.assert_allclose(float(m["kl"]), np.mean(kls), rtol=1e-4)
  np.testing.assert_allclose(float(m["ce"]), np.mean(ces), rtol=1e-4)
  np.testing.assert_allclose(float(loss), np.mean(kls) + 0.5 * np.mean(ces), rtol=1e-4)
  assert m["weight"].tolist() == [2, 2, 2, 1]  # anchor 10 has 3 targets; 12 is masked


def test_restricted_head_and_position_weights_match_fp64(target):
  """With a draft vocabulary the student and the teacher are distributions over its ids (the
  teacher renormalized there), tokens outside it get no CE, and draft position i weighs
  position_weights[i - 1] in both means; the proposal's logits are -inf outside it."""
  model, full = target
  vocab = np.sort(np.random.default_rng(7).choice(V, size=30, replace=False))
  ids = PROMPT + [11, 12, 13, 14, 15]
  ids[10] = int(vocab[3])  # one answer token inside the vocabulary, others maybe not
  head = full.restricted(vocab)
  net, _ = _random(lambda: dr.MTPHead(CFG, rngs=nnx.Rngs(4)), 5)
  hidden = _hidden(model, ids)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  anchors, ok = jnp.asarray([6, 9]), jnp.asarray([True, True])
  n, p_len, pw = len(ids), 10, (1.0, 0.5, 2.0, 3.0)
  loss, m = _compiled(objectives.distill_loss, "mtp", params, net.cfg, head,
                      model.final_norm[...], jnp.asarray(ids), hidden, n, p_len, anchors, ok,
                      k=K, ce_weight=0.3, position_weights=pw)
  student = np.asarray(_compiled(objectives.mtp_logits, params, net.cfg, head, jnp.asarray(ids),
                                 hidden, anchors, K), np.float64)
  assert student.shape[-1] == len(vocab)
  teacher = np.asarray(jax.jit(model.logits)(hidden), np.float64)[:, vocab]
  kl = ce = wk = wc = 0.0
  for r, a in enumerate([6, 9]):
    for i in range(1, K + 1):
      if a + i >= n:
        continue
      lq = student[r, i - 1] - np.logaddexp.reduce(student[r, i - 1])
      lp = teacher[a + i - 1] - np.logaddexp.reduce(teacher[a + i - 1])
      kl, wk = kl + pw[i - 1] * np.sum(np.exp(lp) * (lp - lq)), wk + pw[i - 1]
      if a + i >= p_len and ids[a + i] in vocab:
        col = int(np.searchsorted(vocab, ids[a + i]))
        ce, wc = ce + pw[i - 1] * -lq[col], wc + pw[i - 1]
  assert wc > 0 and any(t not in vocab for t in ids[p_len:])
  np.testing.assert_allclose(float(loss), kl / wk + 0.3 * ce / wc, rtol=1e-4)
  # The proposal through a restricted head drafts inside the vocabulary.
  drafter = dr.MTPDrafter.create(net, head, K)
  drafts, _, _ = drafter.propose(drafter.init_state(1, 64), _context(model, PROMPT))
  assert set(np.asarray(drafts[0]).tolist()) <= set(vocab.tolist())
  lg = np.asarray(head.logits(jnp.ones((2, CFG.dim))))
  np.testing.assert_array_equal(np.isfinite(lg), np.isin(np.arange(V), vocab)[None].repeat(2, 0))
  whole = np.asarray(full.logits(jnp.ones((2, CFG.dim))))
  np.testing.assert_allclose(lg[:, vocab], whole[:, vocab], rtol=1e-6)
  with pytest.raises(ValueError, match="sorted distinct"):
    full.restricted(vocab[::-1])
  with pytest.raises(ValueError, match="already restricted"):
    head.restricted(vocab)


def _eagle3(model, seed=2, vd=40):
  """A random EAGLE-3 head on the tiny target with a draft vocabulary of `vd` ids."""
  from infernix_jax.models.drafters import eagle3 as e3
  net, _ = _random(lambda: e3.Eagle3Net(CFG, (0, 1, 1), vd, rngs=nnx.Rngs(seed)), seed + 1)
  vocab = np.sort(np.random.default_rng(seed).choice(V, size=vd, replace=False))
  net.d2t[...] = jnp.asarray(vocab - np.arange(vd), jnp.int32)
  return net, vocab


def test_eagle3_training_logits_equal_the_proposal(target):
  """The training-time test's unrolled steps are the chain `propose` drafts (true tokens =
  the drafts), through the reduced vocabulary."""
  from infernix_jax.models.drafters import eagle3 as e3
  model, _ = target
  net, vocab = _eagle3(model)
  f = 3 * CFG.dim
  n = len(PROMPT)
  feats = np.random.default_rng(7).normal(size=(n + K, f)).astype(np.float32)  # row j: after j
  before = np.concatenate([np.zeros((1, f), np.float32), feats[:n - 1]])  # the state before
  ctx = dr.DraftContext(tokens=jnp.asarray([PROMPT], jnp.int32), hidden=jnp.asarray(before[None]),
                        counts=jnp.asarray([n], jnp.int32))
  drafter = e3.Eagle3Drafter.create(net, model.embed[...], K)
  drafts, _, _ = drafter.propose(drafter.init_state(1, 64), ctx, jax.random.split(
      jax.random.key(0), 1))
  drafts = [int(t) for t in np.asarray(drafts[0])]
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  logits = _compiled(objectives.eagle3_logits, params, net.cfg, model.embed[...],
                      jnp.asarray(PROMPT + drafts), jnp.asarray(feats), jnp.asarray([n - 1]),
                      K)  # [1, K, Vd]
  assert vocab[np.argmax(np.asarray(logits[0]), -1)].tolist() == drafts


def test_eagle3_loss_matches_fp64(target):
  """Teacher = the stored top-J restricted to the draft vocabulary and renormalized; loss =
  weighted cross-entropy to it + ce_weight x CE of in-vocabulary answer tokens."""
  model, _ = target
  net, vocab = _eagle3(model, seed=4, vd=30)
  t2d = np.full((V,), -1, np.int32)
  t2d[vocab] = np.arange(len(vocab))
  ids = PROMPT + [int(vocab[3]), 12, int(vocab[5]), int(vocab[1]), 15]
  n, j = len(ids), 6
  rng = np.random.default_rng(8)
  feats = rng.normal(size=(n, 3 * CFG.dim)).astype(np.float32)
  logp = np.log(rng.dirichlet(np.ones(V), size=n))
  top_ids = np.argsort(-logp, -1)[:, :j].astype(np.int32)
  top_logp = np.take_along_axis(logp, top_ids, -1).astype(np.float32)
  anchors, ok = jnp.asarray([7, 9, 12]), jnp.asarray([True, True, False])
  p_len, weights = 10, (1.0, 0.5, 0.25, 0.125)
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  loss, m = _compiled(objectives.eagle3_loss, params, net.cfg, model.embed[...],
                      jnp.asarray(t2d), jnp.asarray(ids), jnp.asarray(feats),
                      jnp.asarray(top_ids), jnp.asarray(top_logp), n, p_len, anchors, ok, k=K,
                      step_weights=weights, ce_weight=0.3)
  student = np.asarray(_compiled(objectives.eagle3_logits, params, net.cfg, model.embed[...],
                                 jnp.asarray(ids), jnp.asarray(feats), anchors, K), np.float64)
  xs, ws, ces, wcs = [], [], [], []
  for r, a in enumerate([7, 9]):
    for i in range(1, K + 1):
      if a + i >= n:
        continue
      lq = student[r, i - 1] - np.logaddexp.reduce(student[r, i - 1])
      row = a + i - 1
      inside = [(t2d[t], np.exp(lp)) for t, lp in zip(top_ids[row], top_logp[row])
                if t2d[t] >= 0]
      mass = sum(p for _, p in inside)
      xs.append(-sum(p / mass * lq[d] for d, p in inside))
      ws.append(weights[i - 1])
      tok = ids[a + i]
      if a + i >= p_len and t2d[tok] >= 0:
        ces.append(-lq[t2d[tok]])
        wcs.append(weights[i - 1])
  want = np.dot(xs, ws) / np.sum(ws) + 0.3 * np.dot(ces, wcs) / np.sum(wcs)
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)
  assert ces and m["weight"].tolist() == [2, 2, 2, 2]  # anchor 12 is masked
