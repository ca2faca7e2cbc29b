"""Thinking budget: which rows are still reasoning, and the forced close they receive.

The close itself is one engine step (`Engine._forced_closes`, `HostState.preview_closes` /
`commit_closes`).
"""

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
