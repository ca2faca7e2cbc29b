"""A tiny peaky random target, a toy vocabulary, and FP64 enumeration oracles (exact output
distributions, chi-square): shared by the exactness tests and the exactness study."""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx

from infernix_jax import models as im

# Toy vocabulary: id 0 is EOS; V = 14 tokenizer ids, the model's logits are wider (Vm = 16).
TOY_TOKENS = ["<eos>", "a", "b", "c", "ab", "ba", "abc", "ca", "{", "}", "1", "2", "x", "y"]
TOY_V = len(TOY_TOKENS)
TOY_VM = 16


def toy_vocab():
  from infernix_jax import constrain as ic
  return ic.Vocabulary.from_tokens(TOY_TOKENS, eos_ids=[0], padded_size=TOY_VM)


@functools.lru_cache(maxsize=None)
def tiny_model(seed: int = 0, layers: int = 2, scale: float = 3.0):
  """A tiny random Llama-style model whose logits are far from uniform.

  Random init (std 0.02) gives near-uniform logits; scaling the embeddings spreads them so
  acceptance, rejection and bonus paths all occur.
  """
  cfg = im.ModelConfig(vocab_size=TOY_VM, dim=32, num_layers=layers, num_heads=4,
                       num_kv_heads=2, head_dim=8, ffn_dim=64)
  model = im.Transformer(cfg, rngs=nnx.Rngs(seed))
  model.embed[...] = model.embed[...] * scale
  return cfg, model


class _IdTokenizer:
  """The toy vocabulary's stand-in for a chat tokenizer: decodes ids to their numbers."""

  def decode(self, ids) -> str:
    return " ".join(map(str, ids))


def tiny_llm(lanes: int = 2, capacity: int = 32, drafter: str = "ngram", k: int = 2):
  """`infernix_jax.LLM` on `tiny_model()` and `toy_vocab()` (stacked layout; `drafter` with
  K = k): the API and the server over a target that compiles in seconds."""
  from infernix_jax import LLM
  from infernix_jax.runtime.build import EngineSpec, Target

  cfg, model = tiny_model()
  target = Target(cfg=cfg, model=model, vocab=toy_vocab(), tokenizer=_IdTokenizer(),
                  source="tiny", name="tiny")
  return LLM.from_spec(EngineSpec(layout="stacked", lanes=lanes, capacity=capacity,
                                  drafter=drafter, drafter_options={"k": k}), target=target)


def full_logits(cfg, model, seqs: list[list[int]]) -> np.ndarray:
  """FP64 last-position logits of each sequence by a full causal forward (no KV cache).

  Sequences are right padded to one length and batches to a multiple of 128 (causal
  attention: padding after a position never changes it), so few shapes are compiled.
  """
  graphdef, state = nnx.split(model)
  t = max(16, max(len(s) for s in seqs))
  n = -(-len(seqs) // 128) * 128
  tokens = np.zeros((n, t), np.int32)
  for i, s in enumerate(seqs):
    tokens[i, :len(s)] = s
  logits, _ = im.forward(graphdef, state, jax.numpy.asarray(tokens))
  last = np.asarray([len(s) - 1 for s in seqs])
  return np.asarray(logits, np.float64)[np.arange(len(seqs)), last]


def choice_legal(choices, vocab, out_ids) -> np.ndarray:
  """Brute-force legal set (bool [V]) after out_ids under a choice constraint."""
  prefix = b"".join(vocab.token_bytes[t] for t in out_ids)
  legal = np.zeros(vocab.size, bool)
  for t in range(vocab.size):
    if t in vocab.eos_ids:
      legal[t] = prefix in choices
    elif t not in vocab.control_ids:
      cand = prefix + vocab.token_bytes[t]
      legal[t] = any(c.startswith(cand) for c in choices)
  return legal


def exact_distribution(cfg, model, prompt, vocab, max_tokens, temperature, choices=None,
                       top_k=0, presence=0.0, frequency=0.0, repetition=1.0, min_tokens=0,
                       ignore_eos=False):
  """Exact probabilities of every output of ordinary decoding (FP64 enumeration).

  Args:
    repetition: vLLM's repetition penalty over the prompt's and the output's ids (a
      positive logit divided by it, another multiplied), before presence / frequency.
    min_tokens: EOS is illegal while the output is shorter, unless it is the only legal
      token (the constraint forces the end).
    ignore_eos: EOS is an output token like any other (outputs run to max_tokens).

  Returns:
    dict: output tuple (EOS excluded) -> probability, at temperature > 0; the greedy output
    when temperature == 0 (a dict with one entry).
  """
  eos = set(vocab.eos_ids)
  ends = set() if ignore_eos else eos
  frontier = {(): 1.0}
  final: dict[tuple, float] = {}
  for _ in range(max_tokens):
    if not frontier:
      break
    keys = list(frontier)
    logits = full_logits(cfg, model, [list(prompt) + list(k) for k in keys])
    nxt: dict[tuple, float] = {}
    for key, z in zip(keys, logits):
      for t in set(key) | set(prompt):  # repetition: prompt and output
        z[t] = z[t] / repetition if z[t] > 0 else z[t] * repetition
      for t in set(key):  # presence / frequency: over the output so far (not the prompt)
        z[t] -= presence + frequency * key.count(t)
      legal = np.zeros(cfg.vocab_size, bool)
      legal[:vocab.size] = (choice_legal(choices, vocab, key) if choices is not None
                            else np.ones(vocab.size, bool))
      banned = np.zeros_like(legal)
      banned[list(eos)] = len(key) < min_tokens and not ignore_eos
      if (legal & ~banned).any():
        legal &= ~banned
      if temperature == 0:
        z = np.where(legal, z, -np.inf)
        probs = np.zeros_like(z)
        probs[int(np.argmax(z))] = 1.0
      else:
        if top_k:  # the k largest LEGAL logits (a legal token beyond the free top-k stays)
          cut = np.sort(np.where(legal, z, -np.inf))[::-1][min(top_k, legal.sum()) - 1]
          legal = legal & (z >= cut)
        z = np.where(legal, z / temperature, -np.inf)
        probs = np.exp(z - z.max())
        probs /= probs.sum()
      for t in np.flatnonzero(probs > 0):
        pr = frontier[key] * probs[t]
        if int(t) in ends:
          final[key] = final.get(key, 0.0) + pr
        else:
          nxt[key + (int(t),)] = nxt.get(key + (int(t),), 0.0) + pr
    frontier = nxt
  for key, pr in frontier.items():
    final[key] = final.get(key, 0.0) + pr
  return final


def chi_square_pvalue(expected_probs: dict, samples: list[tuple]) -> float:
  """Pearson chi-square p-value of samples against exact probabilities (bins pooled to >= 5)."""
  from scipy import stats
  n = len(samples)
  counts: dict[tuple, int] = {}
  for s in samples:
    counts[s] = counts.get(s, 0) + 1
  unknown = [s for s in counts if s not in expected_probs]
  assert not unknown, f"impossible outputs sampled: {unknown[:3]}"
  items = sorted(expected_probs.items(), key=lambda kv: -kv[1])
  obs, exp = [], []
  pool_o, pool_e = 0, 0.0
  for key, pr in items:
    e = pr * n
    if e >= 5:
      obs.append(counts.get(key, 0))
      exp.append(e)
    else:
      pool_o += counts.get(key, 0)
      pool_e += e
  if pool_e > 0:
    obs.append(pool_o)
    exp.append(pool_e)
  if len(obs) < 2:
    return 1.0
  return float(stats.chisquare(obs, np.asarray(exp) * (sum(obs) / sum(exp))).pvalue)


def counter_example(rows: int, q_kind: str, drop_illegal: bool, seed: int = 21) -> np.ndarray:
  """DESIGN.md section 5's counter-example through the acceptance reference: p(a)=p(b)=0.5,
  p(x)=0; q(a)=q(x)=0.5 (ids a=0, b=1, x=2), one draft per row drawn from q.

  Args:
    rows: independent rows (draws).
    q_kind: "dense" or "sparse" q.
    drop_illegal: the wrong rule (drop x and draw a bonus from p) instead of the exact one.

  Returns:
    counts of the first output token: int[3] for a, b, x (exact: 0.5, 0.5, 0).
  """
  import jax.numpy as jnp

  from infernix_jax import mask_layout
  from infernix_jax import pallas as ip

  if q_kind not in ("dense", "sparse"):
    raise ValueError(f"q_kind={q_kind!r} must be 'dense' or 'sparse'")
  rng = np.random.default_rng(seed)
  v = 3
  drafts = np.where(rng.random(rows) < 0.5, 0, 2)[:, None].astype(np.int32)  # d ~ q
  legal = np.zeros((rows, 2, v), bool)
  legal[:, :, :2] = True
  states = np.zeros((rows, 2), np.int8)
  states[drafts[:, 0] == 2, 1] = mask_layout.UNREACHABLE
  logits = np.zeros((rows, 2, v), np.float32)
  logits[:, 1] = rng.normal(size=(rows, v))
  n = np.ones(rows, np.int32)
  if drop_illegal:          # the wrong variant: drop x and draw a bonus from p instead
    n[drafts[:, 0] == 2] = 0
  if q_kind == "sparse":
    ids = np.full((rows, 1, 16), -1, np.int32)
    probs = np.zeros((rows, 1, 16), np.float32)
    ids[:, 0, :2], probs[:, 0, :2] = [0, 2], 0.5
    q = ip.SparseQ(jnp.asarray(ids), jnp.asarray(probs))
  else:
    q = ip.DenseQ(jnp.asarray(np.tile(np.float32([[[0.5, 0.0, 0.5]]]), (rows, 1, 1))))
  out = ip.spec_accept_reference(
      jnp.asarray(logits), jnp.asarray(mask_layout.pack(legal)), jnp.ones((rows,), bool),
      jnp.asarray(states), jnp.asarray(drafts), jnp.asarray(n), q,
      ip.SamplingParams.create(rows), jnp.arange(rows, dtype=jnp.uint32),
      jnp.zeros((rows,), jnp.int32), vocab_size=v)
  return np.bincount(np.asarray(out.tokens[:, 0]), minlength=3)
