"""Shared by the stop-string tests (engine, API, server): the tiny target's engines with
drafters that accept a chosen number of drafts, and ordinary decoding's stop-string outputs.

Oracle: the greedy output of a drafter-less engine without stop strings, cut by hand the way
one-token rounds cut it (after each token that brings the output to min_tokens or more, the
first stop string in the whole text ends it: the token ids keep the token that completes
it, the text stops where it starts).
"""

from __future__ import annotations

import functools

from infernix_jax.runtime import (Engine, FinishReason, GenerationRequest, NGramDrafter,
                                  SamplingOptions, drafters)
from infernix_jax.testing import exact_oracle as h
from tests.runtime._scripted import Scripted, ScriptedTree

K = 3
MAX = 16
# A frequency penalty keeps the tiny target's greedy output from repeating one token.
GREEDY = SamplingOptions(temperature=0.0, frequency_penalty=1.0)
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [5, 10, 3, 3, 7])
LANES, CAPACITY = 8, 40


@functools.lru_cache(maxsize=None)
def reference() -> dict[tuple[int, ...], tuple[list[int], str, FinishReason]]:
  """prompt -> (token ids, text, finish reason) of ordinary greedy decoding, no stop string."""
  out = engine("none").generate([GenerationRequest(p, max_tokens=MAX, sampling=GREEDY)
                                 for p in PROMPTS])
  assert all(r.error is None for r in out)
  return {tuple(p): (r.token_ids, r.text, r.finish_reason) for p, r in zip(PROMPTS, out)}


def _future(context) -> list[int] | None:
  """The reference tokens after `context` (a prompt + a prefix of its reference output)."""
  for prompt, (ids, _, _) in reference().items():
    done = list(context[len(prompt):])
    if tuple(context[:len(prompt)]) == prompt and ids[:len(done)] == done:
      return ids[len(done):]
  return None


def oracle_chain(context, limit):
  """Drafts the reference future: verification accepts every draft."""
  return (_future(context) or [])[:limit]


def oracle_tree(context, limit):
  """The reference future as a path of up to K nodes, with a wrong sibling of its root."""
  path = (_future(context) or [])[:min(limit, K)]
  if not path:
    return [], []
  wrong = path[0] % (h.TOY_V - 1) + 1  # another non-EOS id
  drafts, parents = [path[0], wrong], [-1, -1]
  for j, t in enumerate(path[1:]):
    drafts.append(t)
    parents.append(0 if j == 0 else len(drafts) - 2)
  return drafts, parents


# The oracle drafters as the API and the server build drafters: by registered name.
ORACLES = {"oracle-chain": lambda o, c: Scripted(k=o.k, script=oracle_chain),
           "oracle-tree": lambda o, c: ScriptedTree(k=o.k + 1, script=oracle_tree)}


@functools.lru_cache(maxsize=None)
def llm(kind: str):
  """`infernix_jax.LLM` on the tiny target: "none" (ordinary decoding) or an oracle drafter
  with K = 3 (registered while the LLM is built, so no other test sees it)."""
  from infernix_jax import LLM
  from infernix_jax.runtime.build import EngineSpec, Target

  cfg, model = h.tiny_model()
  target = Target(cfg=cfg, model=model, vocab=h.toy_vocab(), tokenizer=h._IdTokenizer(),
                  source="tiny", name="tiny")
  saved = dict(drafters._REGISTRY)
  try:
    options = {}
    if kind in ORACLES:
      drafters.register(f"test-{kind}", ORACLES[kind], help="a test's oracle drafts")
      kind, options = f"test-{kind}", {"k": K}
    return LLM.from_spec(EngineSpec(layout="stacked", lanes=LANES, capacity=CAPACITY,
                                    drafter=kind, drafter_options=options), target=target)
  finally:
    drafters._REGISTRY.clear()
    drafters._REGISTRY.update(saved)


@functools.lru_cache(maxsize=None)
def engine(kind: str) -> Engine:
  """The engine of `llm(kind)`, or one with n-gram drafts ("ngram-chain", "ngram-tree")."""
  if kind.startswith("ngram"):
    cfg, model = h.tiny_model()
    return Engine(model, h.toy_vocab(), NGramDrafter(k=K, n=2, tree=kind == "ngram-tree"),
                  lanes=LANES, capacity=CAPACITY)
  return llm(kind).engine


def expected(prompt, stops, min_tokens=0):
  """(token ids, text, finish reason) that one-token rounds give with `stops`."""
  ids, _, finish = reference()[tuple(prompt)]
  text = ""
  for j, t in enumerate(ids):
    text += h.TOY_TOKENS[t]
    if j + 1 < min_tokens:
      continue
    hits = [text.find(s) for s in stops if s in text]
    if hits:
      return ids[:j + 1], text[:min(hits)], FinishReason.STOP_STRING
  return ids, "".join(h.TOY_TOKENS[t] for t in ids), finish


def cases():
  """(prompt, stops, min_tokens): every substring of one to three characters of each
  reference text as a stop string, some pairs, and a few under min_tokens."""
  out = []
  for prompt in PROMPTS:
    text = reference()[tuple(prompt)][1]
    subs = sorted({text[i:i + n] for n in (1, 2, 3) for i in range(len(text) - n + 1)})
    out += [(prompt, (s,), 0) for s in subs]
    out += [(prompt, (a, b), 0) for a, b in zip(subs[::5], subs[3::5])]
    out += [(prompt, (s,), m) for s, m in zip(subs[::7], (3, 6, 9, 12))]
  return out


def round_cases():
  """One stop string per prompt and position of the token that completes it in a round of
  the oracle drafters (K + 1 tokens a round): the first characters of that token."""
  out = []
  for prompt in PROMPTS:
    ids, text, _ = reference()[tuple(prompt)]
    seen, start = set(), 0
    for j, t in enumerate(ids):
      stop = text[max(0, start - 1):start + 1]  # ends in token j's first character
      start += len(h.TOY_TOKENS[t])
      if j % (K + 1) not in seen and expected(prompt, (stop,))[0] == ids[:j + 1]:
        seen.add(j % (K + 1))
        out.append((prompt, (stop,)))
  return out
