"""The DSpark drafter network against its teacher-forced training layout on a tiny random
target: shapes, each position conditioning on the draft before it (and on nothing later),
sampled q equal to the law the drafts are drawn from (empirically and in closed form),
grammar-masked drafting (per-position masks: only legal drafts, q the masked renormalized
law; trees too), and a short optimisation that lowers the training loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import mask_layout
from infernix_jax import models as im
from infernix_jax.models import drafters as dr
from infernix_jax.models.drafters.dspark import DraftMasks, DSparkDrafter, DSparkNet
from infernix_jax.pallas import OneHotQ, SparseQ
from infernix_jax.testing.exact_oracle import chi_square_pvalue
from infernix_jax.train import objectives
from tests.models.test_drafters import _randomize

pytestmark = pytest.mark.slow  # each test compiles the drafter (seconds on a 2-core CPU)

V, K = 61, 4  # V not a multiple of 32
CFG = im.ModelConfig(vocab_size=V, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=8, ffn_dim=48, qk_norm=False, tie_embeddings=True)
PROMPTS = ([5, 17, 2, 40, 33, 8, 8, 21, 3], [9, 4, 4, 30])


@pytest.fixture(scope="module")
def target():
  model, _ = _randomize(im.Transformer(CFG, rngs=nnx.Rngs(0)), 1)
  return model, dr.TargetHead.from_model(model)


@pytest.fixture(scope="module")
def net():
  return _randomize(DSparkNet(CFG.replace(num_layers=1), CFG.dim, rngs=nnx.Rngs(2)), 3,
                    scale=0.3)[0]


def _hidden(model, ids):
  _, hidden = im.forward(*nnx.split(model), jnp.asarray([ids], jnp.int32))
  return hidden[0]


def _context(model, prompts, copies=1):
  """The prefill DraftContext of `prompts` (each repeated `copies` times), right padded."""
  rows = [p for p in prompts for _ in range(copies)]
  c = max(map(len, rows))
  tokens = np.zeros((len(rows), c), np.int32)
  hidden = np.zeros((len(rows), c, CFG.dim), np.float32)
  for b, ids in enumerate(rows):
    h = np.asarray(_hidden(model, ids))
    tokens[b, :len(ids)] = ids
    hidden[b, 1:len(ids)] = h[:-1]  # hidden[j]: the state that predicted token j
  return dr.DraftContext(jnp.asarray(tokens), jnp.asarray(hidden),
                         jnp.asarray([len(r) for r in rows], jnp.int32))


def _teacher_forced(net, target, prompt, continuation):
  """f64 logits [K, V] of the training layout, the head fed `continuation` (the drafts)."""
  model, head = target
  ids = list(prompt) + [int(t) for t in continuation]
  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  logits = objectives.dspark_logits(params, net.cfg, head, jnp.asarray(ids),
                                    _hidden(model, ids), jnp.asarray([len(prompt) - 1]), K)
  return np.asarray(logits[0], np.float64)


def _top16_law(logits, temperature):
  """(ids, probs) of the top-16 of softmax(logits / T), renormalized (f64)."""
  z = logits / temperature
  top = np.argsort(-z, kind="stable")[:16]
  p = np.exp(z[top] - z[top].max())
  return top, p / p.sum()


def _q_law(q, b, i):
  """Row b, position i of a SparseQ as {id: prob} over its positive entries."""
  ids, probs = np.asarray(q.ids[b, i]), np.asarray(q.probs[b, i], np.float64)
  return {int(t): float(p) for t, p in zip(ids, probs) if p > 0}


def _propose(net, target, ctx, temperature=0.0, seed=0, **kw):
  drafter = DSparkDrafter.create(net, target[1], K, temperature)
  keys = jax.random.split(jax.random.key(seed), ctx.tokens.shape[0])
  return drafter.propose(drafter.init_state(ctx.tokens.shape[0], 64), ctx, keys, **kw)


def test_shapes_cache_and_greedy_drafts_equal_the_training_layout(target, net):
  model, _ = target
  ctx = _context(model, PROMPTS)
  ids, q, cache = _propose(net, target, ctx)
  assert ids.shape == (2, K) and ids.dtype == jnp.int32 and isinstance(q, OneHotQ)
  assert cache.lengths.tolist() == [len(p) for p in PROMPTS]
  for b, prompt in enumerate(PROMPTS):
    drafts = np.asarray(ids[b]).tolist()
    logits = _teacher_forced(net, target, prompt, drafts)
    assert np.argmax(logits, -1).tolist() == drafts
    top2 = np.sort(logits, -1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > 1e-3)  # the argmaxes are well separated
  ids2, q2, _ = _propose(net, target, ctx, temperature=1.5)
  assert isinstance(q2, SparseQ) and q2.ids.shape == q2.probs.shape == (2, K, 16)
  np.testing.assert_allclose(np.asarray(q2.probs).sum(-1), 1.0, rtol=1e-5)
  for b in range(2):
    for i in range(K):
      assert _q_law(q2, b, i).get(int(ids2[b, i]), 0) > 0  # every draft is in its q


def test_each_position_conditions_on_the_draft_before_it(target, net):
  """With every draft forced, q at position i is a function of draft i - 1 alone: changing
  draft 2 changes q at position 3 and nowhere else; each q is the tempered top-16 of the
  training layout's logits fed the same drafts."""
  model, _ = target
  ctx = _context(model, PROMPTS[:1])
  laws = []
  for forced in ([3, 7, 11, 13], [3, 50, 11, 13]):
    _, q, _ = _propose(net, target, ctx, temperature=1.0, forced=jnp.asarray([forced]),
                       n_forced=jnp.asarray([K]))
    laws.append([_q_law(q, 0, i) for i in range(K)])
    logits = _teacher_forced(net, target, PROMPTS[0], forced)
    for i in range(K):
      top, p = _top16_law(logits[i], 1.0)
      got = laws[-1][i]
      assert sorted(got) == sorted(int(t) for t in top[p > 0])
      np.testing.assert_allclose([got[int(t)] for t in top], p, rtol=2e-4, atol=1e-6)
  same = [laws[0][i] == laws[1][i] for i in range(K)]
  assert same == [True, True, False, True], same


def test_sampled_drafts_follow_their_q(target, net):
  """512 draws from one context: draft 1's frequencies against its q (chi-square), and each
  row's q at position 2 is the tempered top-16 of the logits after that row's own draft 1."""
  model, _ = target
  n, temperature = 512, 2.5
  ctx = _context(model, PROMPTS[:1], copies=n)
  ids, q, _ = _propose(net, target, ctx, temperature=temperature, seed=4)
  ids = np.asarray(ids)
  first = _q_law(q, 0, 0)
  assert all(_q_law(q, b, 0) == first for b in range(0, n, 97))
  assert len(first) >= 4  # the law is spread: the test has power
  assert chi_square_pvalue({(t,): p for t, p in first.items()},
                           [(int(t),) for t in ids[:, 0]]) > 1e-3
  for b in range(6):
    logits = _teacher_forced(net, target, PROMPTS[0], ids[b])
    top, p = _top16_law(logits[1], temperature)
    got = _q_law(q, b, 1)
    np.testing.assert_allclose([got.get(int(t), 0.0) for t in top], p, rtol=2e-4, atol=1e-6)


def _random_masks(seed, rows, width=9):
  """bool[rows, K, V] legal sets of `width` ids each."""
  rng = np.random.default_rng(seed)
  legal = np.zeros((rows, K, V), bool)
  for b in range(rows):
    for i in range(K):
      legal[b, i, rng.choice(V, width, replace=False)] = True
  return legal


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_masked_drafting_proposes_only_legal_tokens(target, net, temperature):
  """Per-position masks apply before each position is drafted: every draft is legal there
  (unmasked greedy drafts mostly are not), q is the masked, renormalized law, and a row
  with its mask disabled drafts as if unmasked."""
  model, _ = target
  rows = 16
  ctx = _context(model, PROMPTS, copies=rows // 2)
  legal = _random_masks(5, rows)
  enabled = np.arange(rows) != 3
  masks = DraftMasks.per_position(mask_layout.pack(legal), enabled, V)
  ids, q, _ = _propose(net, target, ctx, temperature, seed=1, masks=masks)
  free, _, _ = _propose(net, target, ctx, temperature, seed=1)
  ids, free = np.asarray(ids), np.asarray(free)
  for b in range(rows):
    if not enabled[b]:
      assert ids[b].tolist() == free[b].tolist()
      continue
    assert all(legal[b, i, ids[b, i]] for i in range(K)), (b, ids[b])
    if temperature == 0:
      continue
    logits = _teacher_forced(net, target, PROMPTS[b // (rows // 2)], ids[b])
    for i in range(K):
      z = np.where(legal[b, i], logits[i], -np.inf)
      top, p = _top16_law(z, temperature)
      got = _q_law(q, b, i)
      assert set(got) <= set(np.flatnonzero(legal[b, i]).tolist())
      np.testing.assert_allclose([got.get(int(t), 0.0) for t in top], p, rtol=2e-4, atol=1e-6)
  if temperature == 0:
    illegal = sum(not legal[b, i, free[b, i]] for b in range(rows) for i in range(K))
    assert illegal > rows  # the masks really changed the drafts


def test_masked_trees_hold_only_legal_paths(target, net):
  model, head = target
  rows = 8
  ctx = _context(model, PROMPTS, copies=rows // 2)
  legal = _random_masks(6, rows, width=6)
  masks = DraftMasks.per_position(mask_layout.pack(legal), np.ones(rows, bool), V)
  drafter = DSparkDrafter.create(net, head, K)
  ids, parents, n, _ = drafter.propose_tree(drafter.init_state(rows, 64), ctx,
                                            jnp.full((rows,), K), width=3, shape="dynamic",
                                            masks=masks)
  ids, parents, n = map(np.asarray, (ids, parents, n))
  assert (n == K).all()
  for b in range(rows):
    for j in range(K):
      depth, up = 1, parents[b, j]
      while up >= 0:
        depth, up = depth + 1, parents[b, up]
      assert legal[b, depth - 1, ids[b, j]], (b, j, depth)


def _path(ids, parents, j):
  out = [int(ids[j])]
  while parents[j] >= 0:
    j = parents[j]
    out.insert(0, int(ids[j]))
  return out


def test_trees_grow_from_the_head_on_each_path(target, net):
  """Width 1: the tree is the greedy chain. Width 3: every node is among the top 3 of the
  head at its depth, fed its own root path (the training layout's logits)."""
  model, head = target
  ctx = _context(model, PROMPTS)
  drafter = DSparkDrafter.create(net, head, K)
  chain, _, _ = _propose(net, target, ctx)
  for width in (1, 3):
    ids, parents, n, _ = drafter.propose_tree(drafter.init_state(2, 64), ctx, jnp.full((2,), K),
                                              width=width, shape="dynamic")
    ids, parents = np.asarray(ids), np.asarray(parents)
    assert np.asarray(n).tolist() == [K, K]
    if width == 1:
      assert parents.tolist() == [[-1, 0, 1, 2]] * 2
      assert ids.tolist() == np.asarray(chain).tolist()
      continue
    for b, prompt in enumerate(PROMPTS):
      for j in range(K):
        path = _path(ids[b], parents[b], j)
        logits = _teacher_forced(net, target, prompt, path + [0] * (K - len(path)))
        assert path[-1] in np.argsort(-logits[len(path) - 1])[:3].tolist(), (b, j, path)


def test_training_steps_lower_the_loss(target):
  """Thirty Adam steps of the distillation objective on one sequence lower its loss."""
  import optax
  model, head = target
  net = DSparkNet(CFG.replace(num_layers=1), CFG.dim, rngs=nnx.Rngs(7))
  ids = jnp.asarray(PROMPTS[0] + [11, 12, 13, 14, 15, 16], jnp.int32)
  hidden = _hidden(model, ids)
  anchors, ok = jnp.asarray([2, 5, 8, 10]), jnp.ones((4,), bool)

  def loss_fn(params):
    return objectives.distill_loss("dspark", params, net.cfg, head, model.final_norm[...],
                                   ids, hidden, ids.shape[0], 9, anchors, ok, k=K,
                                   ce_weight=0.2)[0]

  params = nnx.to_pure_dict(nnx.state(net, nnx.Param))
  opt = optax.adam(3e-3)
  state = opt.init(params)

  @jax.jit
  def step(params, state):
    grads = jax.grad(loss_fn)(params)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  first = float(loss_fn(params))
  for _ in range(30):
    params, state = step(params, state)
  assert float(loss_fn(params)) < 0.7 * first
