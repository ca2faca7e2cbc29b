"""The shipped drafter weights belong to the embedded model and are trained: on a prompt
outside the training mix and the target's own greedy continuation, their first draft
agrees with the target's next token far more often than an untrained head's, in the
objectives' teacher-forced layout (the one `propose` computes)."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax.models import drafters as dr
from infernix_jax.models.drafters import weights as dw


@pytest.fixture(scope="module")
def embedded(smollm2_model):
  from infernix_jax import models as im
  cfg, model, source = smollm2_model
  return cfg, model, im.load_tokenizer(source)


_SEQUENCES: dict = {}


def _sequence(cfg, model, tok):
  """A validation chat prompt + the target's greedy continuation, and its hidden states
  (computed once per module)."""
  if id(model) not in _SEQUENCES:
    _SEQUENCES[id(model)] = _greedy_sequence(cfg, model, tok)
  return _SEQUENCES[id(model)]


def _greedy_sequence(cfg, model, tok):
  from infernix_jax import models as im
  from infernix_jax.chat_template import frame_prompt
  question = ('Answer as JSON following this schema: {"type": "object", "properties": '
              '{"city": {"type": "string"}, "population": {"type": "integer"}, "country": '
              '{"type": "string"}}, "required": ["city", "population", "country"]}')
  # (a schema outside the training mix; the continuation is the target's own, greedy)
  ids = list(tok.encode(frame_prompt(tok, question)))
  p_len = len(ids)
  gd, st = nnx.split(model)
  width = p_len + 32  # one padded width (causal: padding never reaches earlier positions)
  for _ in range(32):
    padded = ids + [0] * (width - len(ids))
    logits, _ = im.forward(gd, st, jnp.asarray([padded], jnp.int32))
    ids.append(int(jnp.argmax(logits[0, len(ids) - 1])))
  _, hidden = im.forward(gd, st, jnp.asarray([ids], jnp.int32))
  return ids, hidden[0], p_len


# Network kinds with no trained weights shipped yet (their training runs are configured:
# configs/train_<kind>.py); each leaves this list when its weights ship.
NOT_YET_SHIPPED = ("dspark",)


@pytest.mark.parametrize("kind", [k for k in dw.KINDS if k not in NOT_YET_SHIPPED])
def test_shipped_weights_load_and_beat_an_untrained_head(embedded, kind):
  from infernix_jax.train import objectives
  cfg, model, tok = embedded
  path = dw.shipped_path(kind)
  assert path.is_file(), f"shipped weights missing: {path}"
  net = dw.load(path, kind, cfg, model.embed[...])
  summary = dw.summary(path)
  assert summary["target"].startswith("SmolLM2-135M-Instruct") and summary["steps"] > 0
  assert path.stat().st_size <= 20e6
  head = dr.TargetHead.from_model(model)  # the draft vocabulary's columns when trained on one
  vocab = dw.draft_vocab_of(net)
  if vocab is not None:
    head = head.restricted(vocab)
  ids, hidden, p_len = _sequence(cfg, model, tok)
  anchors = jnp.arange(p_len - 1, len(ids) - 1, dtype=jnp.int32)
  target_next = np.asarray(ids[p_len:])

  def agreement(module):
    params = nnx.to_pure_dict(nnx.state(module, nnx.Param))
    logits = objectives.LOGITS[kind](params, module.cfg, head, jnp.asarray(ids), hidden,
                                     anchors, 1)
    best = np.argmax(np.asarray(logits[:, 0]), -1)
    drafts = best if vocab is None else vocab[best]
    return float(np.mean(drafts == target_next))

  rand = dw.new_network(kind, net.cfg, cfg.dim, rngs=nnx.Rngs(0))
  trained, untrained = agreement(net), agreement(rand)
  assert trained >= 0.25 and trained > untrained + 0.2, (trained, untrained)


def test_registry_loads_the_shipped_weights_by_default(embedded):
  from infernix_jax.runtime import drafters
  cfg, model, _ = embedded
  shipped = {kind: dw.load(dw.shipped_path(kind), kind, cfg, model.embed[...])
             for kind in dw.KINDS if kind not in NOT_YET_SHIPPED}
  for name, kind in (("mtp", "mtp"), ("dflash", "block"), ("dflash2", "block")):
    d = drafters.create(name, {"k": 4}, target=(cfg, model))
    want = nnx.to_pure_dict(nnx.state(shipped[kind], nnx.Param))
    got = nnx.to_pure_dict(nnx.state(nnx.merge(d.net.graphdef, d.net.state), nnx.Param))
    np.testing.assert_array_equal(np.asarray(got["final_norm"]), np.asarray(want["final_norm"]))
    assert d.net.cfg.num_layers == shipped[kind].cfg.num_layers


def test_shipped_eagle3_head_loads_by_default_and_beats_an_untrained_head(embedded):
  """`--drafter eagle3` loads the head shipped in the public layout (<= 20 MB, f16, with its
  config and training log); its first draft, through `propose`, agrees with the target's
  greedy next token on a prompt outside the training mix far more often than an untrained
  head's."""
  import json

  import jax

  from infernix_jax import models as im
  from infernix_jax.models.drafters import eagle3 as e3
  from infernix_jax.runtime import drafters
  from infernix_jax.runtime.drafters import eagle3 as rt
  cfg, model, tok = embedded
  head = rt.shipped_dir()
  assert sum(p.stat().st_size for p in head.iterdir()) <= 20e6
  assert {"config.json", "model.safetensors", "train_config.json",
          "training_log.json"} <= {p.name for p in head.iterdir()}
  config = json.loads((head / "config.json").read_text())
  assert config["infernix"]["target"].startswith("SmolLM2-135M-Instruct")
  d = drafters.create("eagle3", {"k": 4}, target=(cfg, model))
  ids, _, p_len = _sequence(cfg, model, tok)
  gd, st = nnx.split(model)
  cache = im.KVCache.init(cfg, batch=1, capacity=256)
  _, feats, _ = im.verify(gd, st, cache, jnp.asarray([ids], jnp.int32), taps=d.feature_taps)
  feats = np.asarray(feats[0])

  def agreement(drafter):
    hits = []
    before = np.concatenate([np.zeros((1, feats.shape[1]), np.float32), feats[:-1]])
    for a in range(p_len - 1, len(ids) - 1, 2):  # one padded width: one compile
      ctx = dr.DraftContext(jnp.asarray([ids], jnp.int32), jnp.asarray(before[None]),
                            jnp.asarray([a + 1], jnp.int32))  # context = ids[:a + 1]
      out, _, _ = drafter.propose(drafter.init_state(1, 256), ctx,
                                  jax.random.split(jax.random.key(0), 1))
      hits.append(int(out[0, 0]) == ids[a + 1])
    return float(np.mean(hits))

  untrained = e3.Eagle3Drafter.create(
      e3.Eagle3Net(cfg, d.feature_taps, 8192, rngs=nnx.Rngs(0)), model.embed[...], 4)
  trained, rand = agreement(d.net), agreement(untrained)
  assert trained >= 0.4 and trained > rand + 0.3, (trained, rand)
