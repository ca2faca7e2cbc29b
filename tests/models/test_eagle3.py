"""EAGLE-3: a head written by the test in the public checkpoint layout (config.json +
model.safetensors with fc / midlayer / norm / lm_head / d2t / t2d) drafts what an FP64 numpy
forward of the same tensors drafts, over two rounds; the layout round-trips; heads for
another target, or with tensors that do not match their config, get DrafterWeightsError."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from infernix_jax import models as im
from infernix_jax.models.drafters import eagle3 as e3
from infernix_jax.models.drafters import eagle3_checkpoint as ck
from infernix_jax.models.drafters.base import DraftContext
from infernix_jax.models.drafters.weights import DrafterWeightsError
from tests.models import _np_oracle as orc
from tests.models.test_drafters import _randomize

V, VD, K, B = 61, 24, 3, 2
TARGET = im.ModelConfig(vocab_size=V, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                        head_dim=8, ffn_dim=48, tie_embeddings=True)
LAYER_IDS = [1, 2, 2]  # EAGLE convention: the inputs of these layers = outputs of 0, 1, 1
F = TARGET.dim * len(LAYER_IDS)
PROMPTS = [[5, 17, 2, 40, 33], [8, 8, 21]]


def write_public_head(directory, seed=0, hidden=TARGET.dim, prefix="", layer_ids=LAYER_IDS):
  """A random EAGLE-3 head for TARGET in the public layout (as a published head ships)."""
  rng = np.random.default_rng(seed)
  d, n, g, h, f = hidden, TARGET.num_heads, TARGET.num_kv_heads, TARGET.head_dim, 40
  w = lambda *shape: (0.35 * rng.normal(size=shape)).astype(np.float32)  # noqa: E731
  norm = lambda: (1 + 0.1 * rng.normal(size=(d,))).astype(np.float32)  # noqa: E731
  draft_ids = np.sort(rng.choice(V, size=VD, replace=False))
  t2d = np.zeros((V,), bool)
  t2d[draft_ids] = True
  mid = prefix + ("layers.0." if prefix else "midlayer.")
  tensors = {prefix + "fc.weight": w(d, d * len(layer_ids or LAYER_IDS)),
             mid + "input_layernorm.weight": norm(), mid + "hidden_norm.weight": norm(),
             mid + "self_attn.q_proj.weight": w(n * h, 2 * d),
             mid + "self_attn.k_proj.weight": w(g * h, 2 * d),
             mid + "self_attn.v_proj.weight": w(g * h, 2 * d),
             mid + "self_attn.o_proj.weight": w(d, n * h),
             mid + "post_attention_layernorm.weight": norm(),
             mid + "mlp.gate_proj.weight": w(f, d), mid + "mlp.up_proj.weight": w(f, d),
             mid + "mlp.down_proj.weight": w(d, f), prefix + "norm.weight": norm(),
             "lm_head.weight": w(VD, d), "d2t": (draft_ids - np.arange(VD)).astype(np.int64),
             "t2d": t2d}
  directory.mkdir(parents=True, exist_ok=True)
  save_file(tensors, str(directory / "model.safetensors"))
  config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": d,
            "intermediate_size": f, "num_attention_heads": n, "num_key_value_heads": g,
            "head_dim": h, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "vocab_size": V, "draft_vocab_size": VD, "tie_word_embeddings": False}
  if layer_ids is not None:
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layer_ids}
  (directory / "config.json").write_text(json.dumps(config))
  return {k.removeprefix("model.").replace("layers.0.", "midlayer."): v
          for k, v in tensors.items()}


@pytest.fixture(scope="module")
def target():
  model, _ = _randomize(im.Transformer(TARGET, rngs=nnx.Rngs(0)), seed=1)
  return model


def _context(rows, feats):
  c = max(map(len, rows))
  tokens = np.zeros((B, c), np.int32)
  hidden = np.zeros((B, c, F), np.float32)
  for b, r in enumerate(rows):
    tokens[b, :len(r)] = r
    hidden[b, :len(r)] = feats[b][:len(r)]
  return DraftContext(jnp.asarray(tokens), jnp.asarray(hidden),
                      jnp.asarray([len(r) for r in rows], jnp.int32))


@pytest.mark.parametrize("prefix", ["", "model."])
def test_public_head_drafts_like_an_fp64_forward_over_two_rounds(target, tmp_path, prefix):
  tensors = write_public_head(tmp_path / "head", prefix=prefix)
  net = ck.load(tmp_path / "head", TARGET, target.embed[...])
  assert net.taps == (0, 1, 1) and net.draft_vocab == VD
  drafter = e3.Eagle3Drafter.create(net, target.embed[...], K)
  embed = np.asarray(target.embed[...], np.float64)
  rng = np.random.default_rng(3)
  feats = [rng.normal(size=(12, F)) for _ in range(B)]
  cache = drafter.init_state(B, 64)
  keys = jax.random.split(jax.random.key(0), B)
  ids1, q, cache = drafter.propose(cache, _context(PROMPTS, feats), keys)
  ids1 = np.asarray(ids1)
  for b in range(B):
    n = len(PROMPTS[b])
    assert list(ids1[b]) == orc.eagle3_greedy(TARGET, tensors, embed, feats[b][:n],
                                              PROMPTS[b], K)
    assert all(tensors["t2d"][t] for t in ids1[b])  # drafts lie in the draft vocabulary
  # Round 2: row 0 accepted one draft and a correction, row 1 all drafts and a bonus.
  round2 = [[int(ids1[0, 0]), 7], [*map(int, ids1[1]), 9]]
  feats2 = [feats[b][len(PROMPTS[b]):] for b in range(B)]
  ids2, _, _ = drafter.propose(cache, _context(round2, feats2), keys)
  for b in range(B):
    full = PROMPTS[b] + round2[b]
    assert list(np.asarray(ids2[b])) == orc.eagle3_greedy(
        TARGET, tensors, embed, feats[b][:len(full)], full, K)


def test_drafts_after_a_forced_prefix_are_conditioned_on_it(target, tmp_path):
  """Behind jump-forward the chain drafts after the grammar's forced tokens, feeding them."""
  tensors = write_public_head(tmp_path / "head")
  net = ck.load(tmp_path / "head", TARGET, target.embed[...])
  drafter = e3.Eagle3Drafter.create(net, target.embed[...], K)
  feats = [np.random.default_rng(5).normal(size=(12, F)) for _ in range(B)]
  forced = np.array([[44, 3, 0], [0, 0, 0]], np.int32)
  ids, _, _ = drafter.propose(drafter.init_state(B, 64), _context(PROMPTS, feats),
                              jax.random.split(jax.random.key(0), B), jnp.asarray(forced),
                              jnp.asarray([2, 0], jnp.int32))
  embed = np.asarray(target.embed[...], np.float64)
  for b, n_forced in enumerate((2, 0)):
    n = len(PROMPTS[b])
    assert list(np.asarray(ids[b])) == orc.eagle3_greedy(
        TARGET, tensors, embed, feats[b][:n], PROMPTS[b], K, forced=list(forced[b, :n_forced]))


def test_sampled_drafts_carry_the_distribution_they_were_drawn_from(target, tmp_path):
  write_public_head(tmp_path / "head")
  net = ck.load(tmp_path / "head", TARGET, target.embed[...])
  drafter = e3.Eagle3Drafter.create(net, target.embed[...], K, temperature=0.7)
  feats = [np.random.default_rng(4).normal(size=(12, F)) for _ in range(B)]
  ids, q, _ = drafter.propose(drafter.init_state(B, 64), _context(PROMPTS, feats),
                              jax.random.split(jax.random.key(1), B))
  q_ids, probs = np.asarray(q.ids), np.asarray(q.probs)
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
  assert all(int(ids[b, j]) in q_ids[b, j] for b in range(B) for j in range(K))
  # the first draft's q is the top-16 of softmax(logits / 0.7) over the draft vocabulary
  g = None  # recomputed through the network's own chain step 1
  ctx = _context(PROMPTS, feats)
  g, _ = net(net.fuse(ctx.hidden), ctx.tokens, target.embed[...],
             im.KVCache.init(net.cfg, batch=B, capacity=64))
  logits = np.asarray(net.logits(g[jnp.arange(B), ctx.counts - 1]), np.float64) / 0.7
  for b in range(B):
    top = np.argsort(-logits[b])[:16]
    p = np.exp(logits[b][top] - logits[b][top].max())
    want = dict(zip(np.asarray(net.to_target(jnp.asarray(top))).tolist(), p / p.sum()))
    got = dict(zip(q_ids[b, 0].tolist(), probs[b, 0]))
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[t] for t in want], list(want.values()), rtol=1e-4)


def test_layout_round_trips_and_records_its_target(target, tmp_path):
  write_public_head(tmp_path / "a", layer_ids=None)  # no eagle_config: the default layers
  assert ck.load(tmp_path / "a", TARGET, target.embed[...]).taps == e3.default_taps(2)
  write_public_head(tmp_path / "a", layer_ids=[1, 2, 5])
  with pytest.raises(DrafterWeightsError, match=r"layers \[1, 2, 5\]"):
    ck.load(tmp_path / "a", TARGET, target.embed[...])
  tensors = write_public_head(tmp_path / "a", layer_ids=LAYER_IDS)
  net = ck.load(tmp_path / "a", TARGET, target.embed[...])
  ck.save(tmp_path / "b", net, target_cfg=TARGET, target_embed=target.embed[...],
          target_name="tiny")
  again = load_file(str(tmp_path / "b" / "model.safetensors"))
  for name, value in tensors.items():
    np.testing.assert_allclose(again[name].astype(np.float32), value, rtol=1e-3, atol=1e-3)
  config = json.loads((tmp_path / "b" / "config.json").read_text())
  assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == LAYER_IDS
  assert config["draft_vocab_size"] == VD and config["architectures"] == [ck.ARCHITECTURE]
  # Another target of the same dims: the recorded fingerprint refuses it.
  other, _ = _randomize(im.Transformer(TARGET, rngs=nnx.Rngs(0)), seed=9)
  with pytest.raises(DrafterWeightsError, match="trained for tiny"):
    ck.load(tmp_path / "b", TARGET, other.embed[...])


def test_heads_for_another_target_or_with_wrong_tensors_are_refused(target, tmp_path):
  write_public_head(tmp_path / "wide", hidden=48)
  with pytest.raises(DrafterWeightsError, match="width 48"):
    ck.load(tmp_path / "wide", TARGET, target.embed[...])
  write_public_head(tmp_path / "bad")
  t = load_file(str(tmp_path / "bad" / "model.safetensors"))
  t["fc.weight"] = t["fc.weight"][:, :-1].copy()
  save_file(t, str(tmp_path / "bad" / "model.safetensors"))
  with pytest.raises(DrafterWeightsError, match="fc.weight"):
    ck.load(tmp_path / "bad", TARGET, target.embed[...])
  with pytest.raises(DrafterWeightsError, match="no EAGLE-3 head"):
    ck.load(tmp_path / "missing", TARGET, target.embed[...])
