"""Thinking budget: which rows are still reasoning, and the forced close they receive."""

from __future__ import annotations

from typing import Any, Sequence


class ReasoningTracker:
  """Reasoning state of a row without a FramedSession (unconstrained thinking requests).

  Follows the committed ids the way the framing decoder does: a THINKING prompt starts in
  reasoning, a THINK_OPEN prompt lets the first token open the block (`<think>`) or skip it;
  the `</think>` id ends reasoning (a spelled-out `</think>` stays reasoning).
  """

  def __init__(self, framing: Any, phase: Any):
    from infernix_jax.constrain.framing.thinking import OutputPhase
    self.framing = framing
    self.state = {OutputPhase.THINKING: "reasoning",
                  OutputPhase.THINK_OPEN: "start"}.get(phase, "body")

  @property
  def in_reasoning(self) -> bool:
    return self.state in ("start", "reasoning")

  def observe(self, tokens: Sequence[int]) -> None:
    """Committed tokens, in order."""
    for t in tokens:
      if self.state == "start":
        self.state = "reasoning" if t == self.framing.think_open else "body"
      elif self.state == "reasoning" and t == self.framing.think_close:
        self.state = "body"

  def forced_close_tokens(self) -> list[int]:
    """The canonical close (``<think>`` first when the block is not open yet)."""
    toks = self.framing.forced_close_tokens()
    return [self.framing.think_open] + toks if self.state == "start" else toks


def tracker_for(request: Any, session: Any, vocab: Any) -> ReasoningTracker | None:
  """A tracker for a budgeted request whose session cannot tell reasoning (else None)."""
  if request.thinking_budget is None or hasattr(session, "in_reasoning"):
    return None
  from infernix_jax.constrain.errors import TokenReferenceError
  from infernix_jax.constrain.framing.thinking import QwenFraming, phase_of_prompt
  try:
    framing = vocab.lazy("framing.QwenFraming", lambda: QwenFraming.from_vocab(vocab))
  except TokenReferenceError:  # not a Qwen-family vocabulary: no reasoning block to budget
    return None
  tracker = ReasoningTracker(framing, phase_of_prompt(request.prompt_ids, framing, vocab=vocab))
  return tracker if tracker.in_reasoning else None


def apply_forced_closes(engine: Any) -> bool:
  """Appends the forced close to every row whose reasoning reached its budget, as one step.

  Per row: forced-control preview (the session checks the whole close) -> the physical
  append (the close is model input: run through the target, batched like a prefill, so the
  cache holds [anchor, c1..c_{m-1}] and c_m becomes the anchor; device drafters append it
  too) -> session commit -> publish. The next round samples the first token after the close
  normally under the content / tool rules. A close longer than the row's max_tokens budget
  is cut there (the request ends with finish reason length).

  Returns:
    Whether any lane finished (the caller retires it).
  """
  import jax.numpy as jnp
  import numpy as np

  from infernix_jax.runtime import stages
  from infernix_jax.runtime.errors import StateIntegrityError
  from infernix_jax.runtime.types import FinishReason

  host = engine.host
  due = host.closes_due()
  if not due:
    return False
  rows: dict[int, list[int]] = {}
  finished = False
  for b in due:  # 1. forced-control preview
    lane = engine.lanes[b]
    close = lane.close_tokens()[:lane.remaining]
    if lane.session is not None:
      try:
        if len(close) == len(lane.close_tokens()):
          lane.session.preview_forced_close()
        else:
          r = lane.session.preview(close)
          if int(r.accepted) != len(close):
            lane.session.discard()
            raise RuntimeError(f"the grammar accepted {int(r.accepted)} of {len(close)}")
      except RuntimeError as e:
        lane.error = StateIntegrityError(
            f"request {lane.request.request_id}: the forced thinking close was refused: {e}",
            lane.request.request_id)
        lane.finish = FinishReason.ERROR
        lane.publish([], final=True)
        host.finished.append(b)
        finished = True
        continue
    rows[b] = close
  if not rows:
    return finished
  # 2. physical append: [anchor, c1..c_{m-1}] at each row's committed length (others: none).
  longest = max(len(c) for c in rows.values())
  tokens = np.zeros((engine.b, stages.bucket(longest)), np.int32)  # [B, T]
  counts = np.zeros((engine.b,), np.int32)
  for b, close in rows.items():
    seq = [int(host.anchor[b])] + close[:-1]
    tokens[b, :len(seq)] = seq
    counts[b] = len(seq)
  engine.cache = engine.cache.with_lengths(jnp.asarray(host.lengths))
  hidden, engine.cache = stages.prefill_row(engine.graphdef, engine.state, engine.cache,
                                            jnp.asarray(tokens), jnp.asarray(counts))
  for b, close in rows.items():
    host.lengths[b] += len(close)
    host.anchor[b] = close[-1]
  if engine.drafter.device:
    engine.dstate = engine.drafter.append_rows(engine, rows, hidden)
  # 3. session commit, 4. publish.
  for b, close in rows.items():
    lane = engine.lanes[b]
    if lane.session is not None:
      lane.session.commit()
    if lane.tracker is not None:
      lane.tracker.observe(close)
    lane.forced_close = True
    final = lane.remaining - len(close) <= 0
    lane.publish(list(close), final=final)
    engine.drafter.observe(lane.draft_state, close)
    if final:
      lane.finish = FinishReason.LENGTH
      host.finished.append(b)
      finished = True
  engine._params = None  # penalty histories changed
  return finished
