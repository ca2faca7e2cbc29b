"""The models-level contract end to end: greedy speculation with drafters, `verify` and
`with_lengths` reproduces plain greedy decoding, and a drafter that is the target itself
has every draft accepted (its cache and the DraftContext alignment stay in step)."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import drafters as dr

CFG = im.ModelConfig(vocab_size=53, dim=32, num_layers=2, num_heads=4, num_kv_heads=1,
                     head_dim=8, ffn_dim=48, tie_embeddings=True)
K, STEPS = 5, 12  # K + 1 = the widest prompt: one context width, one compile per drafter
PROMPTS = [[3, 14, 15, 9, 2, 6], [5, 35, 8]]


@pytest.fixture(scope="module")
def target():
  model = im.Transformer(CFG, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  # Larger weights than the 0.02 init, so the greedy path is not a constant token.
  pure = nnx.to_pure_dict(state)
  rng = np.random.default_rng(0)
  pure["embed"] = jnp.asarray(rng.normal(size=pure["embed"].shape), jnp.float32)
  for name, value in pure["layers"].items():
    if not name.endswith("norm"):
      pure["layers"][name] = jnp.asarray(0.3 * rng.normal(size=value.shape), jnp.float32)
  nnx.replace_by_pure_dict(state, pure)
  return graphdef, state


@pytest.fixture(scope="module")
def reference(target):
  """Plain greedy continuations of PROMPTS (prompts padded to one width: one compile)."""
  return [_greedy(*target, prompt, STEPS) for prompt in PROMPTS]


def _greedy(graphdef, state, prompt, steps):
  cache = im.KVCache.init(CFG, 1, 32)
  padded = np.zeros((1, K + 1), np.int32)
  padded[0, :len(prompt)] = prompt
  logits, _, cache = im.prefill(graphdef, state, cache, padded, [len(prompt)])
  out = []
  for _ in range(steps):
    out.append(int(np.argmax(logits[0])))
    logits, _, cache = im.decode(graphdef, state, cache, jnp.asarray(out[-1:], jnp.int32))
  return out


def _speculate(graphdef, state, drafter, prompts, steps):
  """Greedy speculative loop over B rows; returns (tokens per row, accepted per round)."""
  b = len(prompts)
  width = max(map(len, prompts))
  tokens = np.zeros((b, width), np.int32)
  for i, p in enumerate(prompts):
    tokens[i, :len(p)] = p
  lengths = np.array([len(p) - 1 for p in prompts], np.int32)  # the last token is the anchor
  cache = im.KVCache.init(CFG, b, 48)
  _, hidden, cache = im.prefill(graphdef, state, cache, tokens, lengths)
  # hidden[:, c] predicted tokens[:, c + 1]: shift right for the drafter's context.
  shifted = jnp.concatenate([jnp.zeros_like(hidden[:, :1]), hidden], axis=1)[:, :width]
  ctx = dr.DraftContext(jnp.asarray(tokens), shifted, jnp.asarray(lengths + 1))
  anchors = np.array([p[-1] for p in prompts], np.int32)
  dstate = drafter.init_state(b, 48)
  out = [[] for _ in range(b)]
  accepted = []
  committed = lengths.copy()
  while min(map(len, out)) < steps:
    ids, _, dstate = drafter.propose(dstate, ctx)
    ids = np.asarray(ids)
    block = np.concatenate([anchors[:, None], ids], axis=1)  # [B, P]
    logits, hidden, cache = im.verify(graphdef, state, cache, jnp.asarray(block))
    greedy = np.asarray(jnp.argmax(logits, axis=-1))  # [B, P]
    new_tokens = np.zeros((b, K + 1), np.int32)
    counts = np.zeros((b,), np.int32)
    for row in range(b):
      n = 0
      while n < K and ids[row, n] == greedy[row, n]:
        n += 1
      produced = [*ids[row, :n], greedy[row, n]]
      out[row].extend(int(t) for t in produced)
      accepted.append(n)
      new_tokens[row, :n + 1] = produced
      counts[row] = n + 1
      anchors[row] = produced[-1]
    committed = committed + counts  # anchor + n accepted drafts now have target KV
    cache = cache.with_lengths(committed)
    ctx = dr.DraftContext(jnp.asarray(new_tokens), hidden, jnp.asarray(counts))
  return [o[:steps] for o in out], accepted


def test_self_drafting_accepts_everything_and_matches_greedy(target, reference):
  graphdef, state = target
  drafter = dr.DraftModelDrafter.from_model(nnx.merge(graphdef, state), k=K)
  out, accepted = _speculate(graphdef, state, drafter, PROMPTS, STEPS)
  assert accepted and all(n == K for n in accepted)
  assert out == reference


@pytest.mark.parametrize("kind", ["mtp", "dflash"])
def test_network_drafters_keep_greedy_output_exact(target, reference, kind):
  graphdef, state = target
  model = nnx.merge(graphdef, state)
  head = dr.TargetHead.from_model(model)
  if kind == "mtp":
    drafter = dr.MTPDrafter.create(dr.MTPHead(CFG, rngs=nnx.Rngs(1)), head, K)
  else:
    net = dr.DFlashNet(CFG.replace(num_layers=1), CFG.dim, rngs=nnx.Rngs(2))
    drafter = dr.DFlashDrafter.create(net, head, K)
  out, _ = _speculate(graphdef, state, drafter, PROMPTS, STEPS)
  assert out == reference
