"""Per-token trace of a generation: what each round drafted, verified, accepted and why.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, W mask words,
Vm logits width, J sparse-q candidates.

A request asks for it with `GenerationRequest(trace=True)`; its result then carries
`GenerationResult.trace`, a JSON-ready dict whose format is documented in docs/CONTRACTS.md
("Generation traces"). Nothing here runs for an untraced request: the round calls
`trace_step` only while some lane is traced (`HostState.any_traced`), and the host steps
touch a lane's `RequestTrace` only when the lane has one.

Recording has two halves. `trace_step` (device, jitted once per shape, after Finish) reduces
the round's logits, masks and q to a few numbers per position: the target's top-k, the
legal-set size and the legal share of the raw softmax, the drafts after a masked-q redraw and
the drafter's top q. `RequestTrace` (host) joins them with what the host steps know (anchor,
draft limit, forced tokens, what was committed) into one record per round, and gives each
output token exactly one origin.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout

FORMAT = "infernix_jax.trace"
VERSION = 1
TOP = 5  # target candidates kept per verified position
Q_TOP = 4  # drafter q candidates kept per draft (sampling drafters)
# Origins of output tokens (each token has exactly one).
ORIGINS = ("draft", "forced", "correction", "bonus", "plain", "close")
STATE_NAMES = {mask_layout.READY: "Ready", mask_layout.DEAD_END: "DeadEnd",
               mask_layout.UNREACHABLE: "Unreachable"}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TraceArrays:
  """What one round's device step hands the host for traced lanes (all lanes computed).

  Attributes:
    drafts: i32[B, K'] the drafts Finish verified (after a masked-q redraw); n: i32[B].
    states: int8[B, P'] constraint state per position (-1: unconstrained lane).
    legal: i32[B, P'] legal-set size per position (-1: unconstrained lane).
    legal_mass: f32[B, P'] share of the raw softmax (T = 1) on the legal set.
    top_ids, top_probs: [B, P', TOP] the target's most probable legal tokens, p over the
      legal set at the lane's temperature (1 for greedy lanes: their argmax is the greedy
      token), before top-k / top-p / min-p truncation and penalties.
    q_ids, q_probs: [B, K', Q_TOP] the drafter's most probable q (after masking); None for
      one-hot q (the draft itself has q = 1).
  """

  drafts: Any
  n: Any
  states: Any
  legal: Any
  legal_mass: Any
  top_ids: Any
  top_probs: Any
  q_ids: Any = None
  q_probs: Any = None


def trace_step(logits, mask, states, enabled, prop, params, seed, position, bias=None, *,
               vocab_size: int, masked_q: bool, top: int = TOP) -> TraceArrays:
  """The round's per-position trace numbers (`_round` jits it and calls it only while a lane
  is traced).

  Args:
    logits: [B, P', Vm] the verify's logits; mask: i32[B, P', W] | None; states: int8[B, P']
      | None; enabled: bool[B] | None (the masks Finish used).
    prop: the round's Proposal (drafts i32[B, K'], n i32[B], q).
    params: SamplingParams [B]; seed: u32[B]; position: i32[B] (as Finish).
    bias: f32[B, P', Vm] | None, a sampling law's logit bias.
    vocab_size: V; masked_q: Finish masked this q (the redraw is recomputed: same stream).

  Returns:
    TraceArrays.
  """
  from infernix_jax import pallas as ip
  from infernix_jax.runtime import _masked_q
  b, p, vm = logits.shape
  drafts, n, q = prop.drafts, prop.n, prop.q
  if bias is not None:
    logits = logits + bias
  if mask is not None and masked_q:
    q, drafts, n, states = _masked_q.apply(q, mask, enabled, states, drafts, n, seed, position,
                                           vocab_size)
  z = logits.reshape(b * p, vm).astype(jnp.float32)  # [R, Vm], R = B P'
  if mask is None:
    legal = jnp.broadcast_to(jnp.arange(vm) < vocab_size, (b * p, vm))
    count = jnp.full((b, p), -1, jnp.int32)
    st = jnp.full((b, p), -1, jnp.int8)
  else:
    legal = ip.unpack_legal(mask.reshape(b * p, -1), jnp.repeat(enabled, p), vocab_size,
                            vm)  # [R, Vm]
    count = jnp.where(enabled[:, None],
                      jnp.sum(jax.lax.population_count(mask), axis=-1), -1)  # [B, P']
    st = jnp.where(enabled[:, None], states, jnp.int8(-1))
  in_vocab = jnp.arange(vm) < vocab_size
  lse = jax.nn.logsumexp(jnp.where(in_vocab, z, -jnp.inf), axis=-1)  # [R]
  mass = jnp.exp(jax.nn.logsumexp(jnp.where(legal, z, -jnp.inf), axis=-1) - lse).reshape(b, p)
  # p over the legal set at the lane's temperature (1 for greedy lanes: same argmax), with no
  # sort: top-k of the masked logits, normalized by their log-sum-exp.
  t = jnp.repeat(jnp.where(params.temperature > 0, params.temperature, 1.0), p)[:, None]
  zl = jnp.where(legal, z / t, -jnp.inf)  # [R, Vm]
  best, top_ids = jax.lax.top_k(zl, min(top, vm))  # [R, TOP]
  top_probs = jnp.where(jnp.isfinite(best),
                        jnp.exp(best - jax.nn.logsumexp(zl, axis=-1, keepdims=True)), 0.0)
  q_ids = q_probs = None
  if isinstance(q, ip.SparseQ):
    q_probs, at = jax.lax.top_k(q.probs.astype(jnp.float32), min(Q_TOP, q.probs.shape[-1]))
    q_ids = jnp.take_along_axis(q.ids, at, axis=-1)
  elif isinstance(q, ip.DenseQ):
    q_probs, q_ids = jax.lax.top_k(q.probs.astype(jnp.float32), min(Q_TOP, q.probs.shape[-1]))
  return TraceArrays(drafts=drafts, n=n, states=st, legal=count.astype(jnp.int32),
                     legal_mass=mass, top_ids=top_ids.reshape(b, p, -1),
                     top_probs=top_probs.reshape(b, p, -1), q_ids=q_ids, q_probs=q_probs)


def _num(x: float, digits: int = 5) -> float | None:
  """A probability for JSON: rounded to `digits` significant digits; None when not finite."""
  x = float(x)
  if not math.isfinite(x):
    return None
  return float(f"{x:.{digits}g}")


class RequestTrace:
  """The trace of one request, filled by the host steps of its rounds (`HostState`).

  Args:
    request: the GenerationRequest.
    vocab: the tokenizer's Vocabulary (pieces of the ids the trace names).
    meta: what the engine knows of the run (drafter, K, masked_q, bridge, backend, ...).
  """

  def __init__(self, request, vocab, meta: dict):
    self.vocab = vocab
    # under ignore_eos an EOS is an output token like any other
    self.eos = frozenset() if request.ignore_eos else frozenset(int(e) for e in vocab.eos_ids)
    self.meta = dict(meta)
    self.prompt_ids = list(request.prompt_ids)
    self.rounds: list[dict] = []
    self.tokens: list[dict] = []
    self.closes: list[dict] = []
    self._ids: set[int] = set()
    self._begin: dict | None = None
    self._device: dict | None = None
    self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

  # --- host steps ----------------------------------------------------------------------------
  def begin(self, anchor: int, limit: int, forced) -> None:
    """Round inputs: the anchor, the drafts allowed, the grammar-forced tokens."""
    self._begin = {"anchor": int(anchor), "limit": int(limit),
                   "forced": [int(t) for t in forced]}
    self._device = None

  def device(self, proposed, n_proposed: int, arrays: TraceArrays, b: int) -> None:
    """Row b of the round's device trace (numpy) and the proposal before any redraw."""
    n = int(arrays.n[b])
    verified = [int(t) for t in arrays.drafts[b, :n]]
    before = [int(t) for t in proposed[:int(n_proposed)]]
    redraw = None
    for i, (old, new) in enumerate(zip(before, verified)):
      if old != new:
        redraw = {"position": i, "drafted": old, "redrawn": new}
        break
    positions = []
    for i in range(n + 1):
      state = int(arrays.states[b, i])
      legal = int(arrays.legal[b, i])
      top = [[int(t), _num(pr)] for t, pr in zip(arrays.top_ids[b, i], arrays.top_probs[b, i])
             if pr > 0]
      positions.append({"state": STATE_NAMES.get(state), "legal": legal if legal >= 0 else None,
                        "legal_mass": _num(arrays.legal_mass[b, i], 4) if legal >= 0 else None,
                        "top": top})
      self._ids.update(t for t, _ in top)
    q = None
    if arrays.q_ids is not None:
      q = [[[int(t), _num(pr)] for t, pr in zip(arrays.q_ids[b, i], arrays.q_probs[b, i])
            if pr > 0] for i in range(n)]
      self._ids.update(t for row in q for t, _ in row)
    self._ids.update(before + verified)
    self._device = {"proposed": before, "drafts": verified, "redraw": redraw, "q": q,
                    "positions": positions}

  def commit(self, out, accepted: int, n_drafts: int) -> None:
    """The round's committed tokens `out` (EOS included when accepted): one round record, and
    one origin per output token (EOS is no output token: the round records it)."""
    begin = self._begin or {"anchor": None, "limit": 0, "forced": []}
    dev = self._device or {"proposed": [], "drafts": [], "redraw": None, "q": None,
                           "positions": []}
    r, start = len(self.rounds), len(self.tokens)
    n_forced = min(len(begin["forced"]), n_drafts)
    eos = False
    for i, t in enumerate(out):
      t = int(t)
      if t in self.eos:
        eos = True
        break
      if i < accepted:
        origin = "forced" if i < n_forced else "draft"
      elif n_drafts == 0:
        origin = "plain"
      elif accepted == n_drafts:
        origin = "bonus"
      else:
        origin = "correction"
      self._token(t, origin, r, i)
    self.rounds.append({"round": r, "position": start, "anchor": begin["anchor"],
                        "limit": begin["limit"], "forced": begin["forced"], **dev,
                        "drafted": int(n_drafts), "accepted": int(accepted),
                        "committed": [int(t) for t in out], "eos": eos})
    if begin["anchor"] is not None:
      self._ids.add(begin["anchor"])
    self._ids.update(int(t) for t in out)
    self._begin = self._device = None

  def close(self, tokens) -> None:
    """A forced thinking close the engine appended (its tokens' origin: "close")."""
    self.closes.append({"position": len(self.tokens), "tokens": [int(t) for t in tokens]})
    for i, t in enumerate(tokens):
      self._token(int(t), "close", None, i)

  def _token(self, t: int, origin: str, r: int | None, offset: int) -> None:
    text = self._utf8.decode(self.vocab.decode([t]), final=False)
    self.tokens.append({"id": t, "text": text, "origin": origin, "round": r, "offset": offset})

  # --- the JSON object -----------------------------------------------------------------------
  def _piece(self, t: int) -> str:
    if 0 <= t < self.vocab.size:
      return self.vocab.token_bytes[t].decode("utf-8", errors="backslashreplace")
    return f"<{t}>"

  def to_json(self, result) -> dict:
    """The trace as a JSON-ready dict (format in docs/CONTRACTS.md), with the result's
    outcome and statistics."""
    tail = self._utf8.decode(b"", final=True)
    if tail and self.tokens:
      self.tokens[-1]["text"] += tail
    prompt_text = self.vocab.decode(self.prompt_ids).decode("utf-8", errors="replace")
    return {
        "format": FORMAT, "version": VERSION,
        "meta": {**self.meta, "request_id": result.request_id, "top": TOP, "q_top": Q_TOP},
        "prompt": {"text": prompt_text, "tokens": len(self.prompt_ids)},
        "rounds": self.rounds,
        "closes": self.closes,
        "tokens": self.tokens,
        "pieces": {str(t): self._piece(t) for t in sorted(self._ids)},
        "result": {
            "finish_reason": result.finish_reason.value, "error": result.error,
            "error_kind": result.error_kind, "text": result.text,
            "token_ids": list(result.token_ids),
            "per_round": [[x.drafted, x.accepted] for x in result.rounds],
            "accepted_length": result.accepted_length,
            "acceptance_rate": result.acceptance_rate,
            "tokens_per_second": result.tokens_per_second,
            "wall_seconds": result.wall_seconds,
        },
    }


def meta_of(request, session, drafter, *, masked_q: bool, bridge: str) -> dict:
  """What the engine knows of a traced request's run, for the trace's header."""
  constraint = request.constraint
  kind = (constraint.kind.value if constraint is not None
          else "tools" if request.tools is not None else None)
  s = request.sampling
  return {"drafter": drafter.name, "k": int(drafter.k), "jump_forward": bool(drafter.uses_forced),
          "masked_q": bool(masked_q and drafter.sampling), "q_kind": drafter.q_kind,
          "bridge": bridge, "constraint": kind,
          "backend": getattr(session, "backend", None) if session is not None else None,
          "sampling": dataclasses.asdict(s), "sampling_law": request.sampling_law,
          "max_tokens": request.max_tokens, "max_drafts": request.max_drafts,
          "min_tokens": request.min_tokens, "ignore_eos": request.ignore_eos}
