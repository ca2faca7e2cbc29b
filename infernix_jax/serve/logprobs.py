"""Token log-probabilities from a generation trace, in the chat and completions shapes.

Each output token's distribution is the trace's `top` at the position that decided it: the
target renormalized over the legal set (the constraint's mask; all tokens when free) at the
request's temperature (T = 1 when greedy: the same argmax), before top-k / top-p / min-p and
penalties. The trace keeps the 5 most probable legal tokens per position, so `top_logprobs`
is at most 5, and a sampled token outside them gets OpenAI's -9999.0 ("very unlikely").
A token the engine appended (a thinking-budget close) has logprob 0.
"""

from __future__ import annotations

import math

UNLIKELY = -9999.0


def _lp(p: float) -> float:
  return math.log(p) if p > 0 else UNLIKELY


def per_token(trace: dict) -> list[tuple[int, float, list[tuple[int, float]]]]:
  """(token id, logprob, [(id, logprob) of the top alternatives]) per output token."""
  rounds = {r["round"]: r for r in trace["rounds"]}
  out = []
  for t in trace["tokens"]:
    r = rounds.get(t.get("round"))
    if r is None:
      out.append((t["id"], 0.0, []))
      continue
    top = [(int(i), float(p)) for i, p in r["positions"][t["offset"]]["top"]]
    p = dict(top).get(t["id"])
    out.append((t["id"], UNLIKELY if p is None else _lp(p), [(i, _lp(q)) for i, q in top]))
  return out


def _piece(trace: dict, token: int) -> str:
  return trace["pieces"].get(str(token), "")


def chat(trace: dict, top: int) -> dict:
  """A chat choice's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}."""
  def entry(i, lp):
    text = _piece(trace, i)
    return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
  return {"content": [dict(entry(i, lp), top_logprobs=[entry(j, q) for j, q in alts[:top]])
                      for i, lp, alts in per_token(trace)], "refusal": None}


def text(trace: dict, top: int) -> dict:
  """A text completion choice's `logprobs`: tokens, token_logprobs, top_logprobs,
  text_offset."""
  tokens, lps, tops, offsets, at = [], [], [], [], 0
  for i, lp, alts in per_token(trace):
    piece = _piece(trace, i)
    tokens.append(piece)
    lps.append(lp)
    tops.append({_piece(trace, j): q for j, q in alts[:top]} if top else None)
    offsets.append(at)
    at += len(piece)
  return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
          "text_offset": offsets}
