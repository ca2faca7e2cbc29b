"""Token log-probabilities of a generation result, in the chat and completions shapes.

Each output token's entry is the engine's exact one (`GenerationRequest.logprobs`,
`runtime.TokenLogprob`): its log-probability under the distribution it was sampled from (the
target renormalized over the legal set, after the penalties, the temperature and top-k /
top-p / min-p; greedy: T = 1 and no truncation) and up to 20 most probable alternatives of
that distribution (fewer when its support is smaller). A token the engine appended (a
thinking-budget close) has logprob 0 and no alternatives.
"""

from __future__ import annotations

from typing import Callable, Sequence

UNLIKELY = -9999.0  # OpenAI's "very unlikely", for a log-probability that is not finite


def _lp(x: float) -> float:
  return float(x) if x > float("-inf") else UNLIKELY


def piece_of(vocab) -> Callable[[int], str]:
  """A token id -> its text piece (invalid UTF-8 bytes backslash-escaped)."""
  def piece(token: int) -> str:
    if 0 <= token < vocab.size:
      return vocab.token_bytes[token].decode("utf-8", errors="backslashreplace")
    return ""
  return piece


def chat(entries: Sequence, top: int, piece: Callable[[int], str]) -> dict:
  """A chat choice's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}."""
  def entry(i, lp):
    text = piece(i)
    return {"token": text, "logprob": _lp(lp), "bytes": list(text.encode("utf-8"))}
  return {"content": [dict(entry(x.token_id, x.logprob),
                           top_logprobs=[entry(j, q) for j, q in x.top[:top]])
                      for x in entries], "refusal": None}


def text(entries: Sequence, top: int, piece: Callable[[int], str]) -> dict:
  """A text completion choice's `logprobs`: tokens, token_logprobs, top_logprobs,
  text_offset."""
  tokens, lps, tops, offsets, at = [], [], [], [], 0
  for x in entries:
    p = piece(x.token_id)
    tokens.append(p)
    lps.append(_lp(x.logprob))
    tops.append({piece(j): _lp(q) for j, q in x.top[:top]} if top else None)
    offsets.append(at)
    at += len(p)
  return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
          "text_offset": offsets}
