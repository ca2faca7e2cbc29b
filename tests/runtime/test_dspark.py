"""The registered DSpark drafter on the tiny random target: greedy generation through the
engine equals ordinary greedy decoding on both bridges (chains, trees, behind jump-forward
under a constraint); drafting masked by a device trie automaton follows the grammar through
the drafts themselves; its options, its weights file and its training config."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.errors import ParameterError
from infernix_jax.runtime import drafters
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest
from infernix_jax.testing import exact_oracle as h

K = 3
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [4, 5, 6])
CHOICES = ["abc", "ab", "ba1", "cab", "x{y}", "cabba", "acab"]


def copy_net():
  """A DSpark network built by hand to draft the token before each position again (the
  tiny target's greedy continuations of PROMPTS repeat their last token, so its drafts
  are accepted): the backbone adds nothing to the mask embedding m (attention and MLP
  outputs zeroed), the head's gate reads the constant RMSNorm(m) and opens wide, and its
  value path maps the previous token's normed embedding onto a vector the LM head scores
  highest at that same token (pseudo-inverses of the embedding and the head)."""
  from flax import nnx

  from infernix_jax.models.drafters.dspark import DSparkNet
  cfg, model = h.tiny_model()
  net = DSparkNet(cfg.replace(num_layers=1), cfg.dim, rngs=nnx.Rngs(0))
  d = cfg.dim
  for name in ("o", "down"):
    getattr(net.layers, name)[...] = jnp.zeros_like(getattr(net.layers, name)[...])
  m = np.asarray(net.mask_embed[...], np.float64)
  c = m / np.sqrt(np.mean(m * m) + cfg.norm_eps)  # RMSNorm(m), unit norm weights
  embed = np.asarray(model.embed[...], np.float64)  # [Vm, D]
  lm_head = embed.T if cfg.tie_embeddings else np.asarray(model.lm_head[...], np.float64)
  w_in = np.zeros((2 * d, 2 * d))
  w_in[:d, :d] = np.outer(c, np.ones(d)) * 10.0 / (c @ c)  # gate = 10 on every channel
  w_in[d:, d:] = np.linalg.pinv(embed) @ np.linalg.pinv(lm_head)  # e_t -> row t of pinv(L)
  net.head_in[...] = jnp.asarray(w_in, jnp.float32)
  net.head_out[...] = jnp.asarray(10.0 * np.eye(d), jnp.float32)
  return net


@functools.lru_cache(maxsize=None)
def _engine(name: str, bridge: str = "stages", jump: bool = False, **options):
  cfg, model = h.tiny_model()
  if name == "none":
    return Engine(model, h.toy_vocab(), drafters.create("none"), lanes=4, capacity=48)
  d = drafters.create(name, {"k": K, "weights": copy_net(), **options}, target=(cfg, model),
                      jump_forward=jump)
  return Engine(model, h.toy_vocab(), d, lanes=4, capacity=48, bridge=bridge)


def _requests(constrained: bool):
  spec = ic.OutputConstraint.choice(CHOICES) if constrained else None
  return [GenerationRequest(list(p), max_tokens=10, constraint=spec) for p in PROMPTS]


def _tokens(engine, requests):
  results = engine.generate(requests)
  assert not [r.error for r in results if r.error]
  return [r.token_ids for r in results], sum(r.accepted for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("bridge,options", [("stages", ()), ("callback", ()),
                                            ("stages", (("tree", True),))],
                         ids=["stages", "callback", "tree"])
def test_greedy_generation_equals_ordinary_greedy(bridge, options):
  want, _ = _tokens(_engine("none"), _requests(False))
  got, accepted = _tokens(_engine("dspark", bridge, **dict(options)), _requests(False))
  assert got == want
  assert accepted > 0  # drafts were verified and some taken: speculation really ran


@pytest.mark.slow
def test_constrained_greedy_behind_jump_forward_equals_ordinary_greedy():
  want, _ = _tokens(_engine("none"), _requests(True))
  got, _ = _tokens(_engine("dspark", jump=True), _requests(True))
  assert got == want
  assert all(h.toy_vocab().decode([t for t in ids if t != 0]).decode() in CHOICES
             for ids in got)


@pytest.mark.slow
def test_sampled_drafting_behind_jump_forward_passes_check_drafter_on_the_callback_bridge():
  """The sampled head behind jump-forward (drafts conditioned on forced tokens, sparse q,
  masked q) through `testing.check_drafter` on the callback bridge: T = 0 equals ordinary
  greedy, T = 1 follows ordinary decoding's law free and constrained (chi-square)."""
  from infernix_jax.testing import check_drafter
  report = check_drafter("dspark", {"k": K, "weights": "random", "sampling": True},
                         jump_forward=True, bridge="callback")
  assert report.passed, report
  assert report.drafted > 0, report


@pytest.mark.slow
@pytest.mark.parametrize("temperature,tree", [(0.0, False), (1.0, False), (0.0, True)])
def test_automaton_masks_follow_the_drafts(temperature, tree):
  """Masks from a device trie automaton: each position's mask is the state's after the
  drafts before it, so every chain (and every tree path) is a prefix the grammar allows
  (positions after EOS are filler, drafted unmasked, never verified); the unmasked drafter
  leaves the grammar on most rows."""
  from infernix_jax.constrain import trie
  from infernix_jax.models.drafters.dspark import DraftMasks
  from infernix_jax.runtime import device_automaton as da
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  compiled = trie.compile_choice(vocab, CHOICES)
  auto = da.DeviceAutomaton.from_tables(compiled.export_tables())
  host = compiled.automaton
  opts = {"k": K, "weights": "random", "seed": 2}
  if temperature:
    opts.update(sampling=True, temperature=temperature)
  net = drafters.create("dspark", opts, target=(cfg, model)).net
  rows = 24
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, vocab.size, (rows, 5)).astype(np.int32)
  from infernix_jax.models.drafters import DraftContext
  ctx = DraftContext(jnp.asarray(tokens), jnp.asarray(rng.normal(size=(rows, 5, cfg.dim)),
                                                      jnp.float32),
                     jnp.full((rows,), 5, jnp.int32))
  masks = DraftMasks.from_automaton(auto, np.zeros(rows, np.int32), np.ones(rows, bool))

  def walk(ids, parents):
    legal = 0
    for b in range(rows):
      for j in range(K):
        path, up = [ids[b, j]], parents[b, j]
        while up >= 0:
          path, up = [ids[b, up]] + path, parents[b, up]
        node = 0
        for t in path:
          if node == host.end:  # after EOS: a filler position, never verified
            break
          node = host.step(node, int(t))
        legal += node != host.dead
    return legal

  chain = np.broadcast_to(np.arange(-1, K - 1), (rows, K))
  outs = {}
  for masked in (True, False):
    keys = jax.random.split(jax.random.key(3), rows)
    state = net.init_state(rows, 32)
    if tree:
      ids, parents, _, _ = net.propose_tree(state, ctx, jnp.full((rows,), K), width=2,
                                            shape="dynamic", masks=masks if masked else None)
      outs[masked] = walk(np.asarray(ids), np.asarray(parents))
    else:
      ids, _, _ = net.propose(state, ctx, keys, masks=masks if masked else None)
      outs[masked] = walk(np.asarray(ids), chain)
  assert outs[True] == rows * K
  assert outs[False] < rows * K // 2


def test_options_and_missing_weights():
  cfg, model = h.tiny_model()
  assert "dspark" in drafters.names()
  assert {"k", "weights", "seed", "sampling", "temperature", "tree"} <= set(
      drafters.fields("dspark"))
  with pytest.raises(ParameterError, match="token trees are drafted greedily"):
    drafters.options("dspark", {"sampling": True, "tree": True})
  with pytest.raises(ParameterError, match="temperature"):
    drafters.options("dspark", {"sampling": True, "temperature": 0})
  with pytest.raises(ValueError, match="no dspark drafter weights"):
    drafters.create("dspark", {"k": 2}, target=(cfg, model))  # none shipped yet
  d = drafters.create("dspark", {"k": 2, "weights": "random", "sampling": "true"},
                      target=(cfg, model))
  assert d.q_kind == "sparse" and d.sampling
  assert drafters.create("dspark", {"k": 2, "weights": "random"},
                         target=(cfg, model)).q_kind == "onehot"


@pytest.mark.slow
def test_weights_file_round_trip_and_training_config(tmp_path):
  """A DSpark network saved as a drafter file loads through the registry and drafts what it
  drafted before; the training config passes the loop's checks and builds a DSpark net."""
  import importlib

  from flax import nnx

  from infernix_jax.models.drafters import DraftContext
  from infernix_jax.models.drafters import weights as dw
  from infernix_jax.models.drafters.dspark import DSparkNet
  from infernix_jax.train import loop
  cfg, model = h.tiny_model()
  net = drafters.create("dspark", {"k": K, "weights": "random", "seed": 5},
                        target=(cfg, model)).net
  module = nnx.merge(net.graphdef, net.state)
  path = dw.save(tmp_path / "d.safetensors", module, kind="dspark", target_cfg=cfg,
                 target_embed=model.embed[...], target_name="tiny")
  loaded = drafters.create("dspark", {"k": K, "weights": str(path)}, target=(cfg, model)).net
  ctx = DraftContext(jnp.asarray([PROMPTS[0]], jnp.int32),
                     jnp.ones((1, len(PROMPTS[0]), cfg.dim), jnp.float32),
                     jnp.asarray([len(PROMPTS[0])], jnp.int32))
  a = net.propose(net.init_state(1, 32), ctx)[0]
  b = loaded.propose(loaded.init_state(1, 32), ctx)[0]
  assert np.asarray(a).tolist() == np.asarray(b).tolist()  # f16 storage keeps the argmaxes
  with pytest.raises(dw.DrafterWeightsError, match="holds dspark drafter weights, not block"):
    dw.load(path, "block", cfg, model.embed[...])
  c = importlib.import_module("configs.train_dspark").get_config("smoke")
  loop.check(c)
  built = loop.make_net(c, cfg, model)
  assert isinstance(built, DSparkNet) and built.cfg.num_layers == c.layers
  np.testing.assert_array_equal(np.asarray(built.layers.params()["q"][-1]),
                                np.asarray(model.layers.params()["q"][-1]))
