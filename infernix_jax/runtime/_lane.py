"""One active request in a lane: its session, drafter state, committed output and stats."""

from __future__ import annotations

import codecs
import dataclasses
import time
from typing import Any

from infernix_jax.runtime.errors import GenerationError
from infernix_jax.runtime.types import (ConstraintReport, FinishReason, GenerationRequest,
                                        GenerationResult, RoundStat, TokenEvent)


@dataclasses.dataclass
class Lane:
  """Host state of one admitted request (the lane index may change between requests only)."""

  request: GenerationRequest
  session: Any  # a constraint session (MatcherSession, FramedSession, ...) or None (free)
  report: ConstraintReport | None
  vocab: Any
  t_start: float = dataclasses.field(default_factory=time.perf_counter)
  output: list[int] = dataclasses.field(default_factory=list)
  rounds: list[RoundStat] = dataclasses.field(default_factory=list)
  text_parts: list[str] = dataclasses.field(default_factory=list)
  cancelled: bool = False
  finish: FinishReason | None = None
  error: GenerationError | None = None
  tracker: Any = None  # ReasoningTracker of a budgeted row without a FramedSession
  forced_close: bool = False  # the thinking budget closed the reasoning block
  law: Any = None  # the faithful law of a sampling_law other than "local" (bias_row, advance)
  law_node: Any = 0  # the law's state after the committed output (ExactFiniteLaw: a trie node)
  trace: Any = None  # runtime.trace.RequestTrace of a traced request (None: no trace work)
  prompt_words: Any = None  # packed prompt ids (repetition penalty), built on first use
  min_tokens_unmet: bool = False  # ended on a grammar-forced EOS before min_tokens
  logprobs: Any = None  # [TokenLogprob] per output token when the request asks for them

  def __post_init__(self):
    self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
    if self.request.logprobs is not None and self.logprobs is None:
      self.logprobs = []


  @property
  def constrained(self) -> bool:
    return self.session is not None

  @property
  def in_reasoning(self) -> bool:
    """The committed output is inside the reasoning block (framed session or tracker)."""
    if self.session is not None and hasattr(self.session, "in_reasoning"):  # FramedSession
      return bool(self.session.in_reasoning)
    return self.tracker is not None and self.tracker.in_reasoning

  def reasoning_left(self) -> int | None:
    """Reasoning tokens left under the thinking budget (None: no budget applies now)."""
    budget = self.request.thinking_budget
    if budget is None or not self.in_reasoning:
      return None
    return budget - len(self.output)

  def close_tokens(self) -> list[int]:
    """The forced close this row receives at its budget."""
    if self.tracker is not None:
      return self.tracker.forced_close_tokens()
    return list(self.session.forced_close_tokens())

  @property
  def remaining(self) -> int:
    return self.request.max_tokens - len(self.output)

  def publish(self, tokens: list[int], final: bool) -> None:
    """Appends committed tokens (EOS excluded) and streams them."""
    self.output.extend(tokens)
    text = self._utf8.decode(self.vocab.decode(tokens), final=final) if tokens or final else ""
    self.text_parts.append(text)
    if self.request.on_token is not None and (tokens or final):
      self.request.on_token(TokenEvent(self.request.request_id, tuple(tokens), text, final))

  def fail(self, error: GenerationError) -> None:
    """Ends the request with `error` (cancelled or error); a raising stream callback is
    ignored here (the request is ending anyway)."""
    from infernix_jax.runtime.errors import RequestCancelled
    self.error = error
    self.finish = (FinishReason.CANCELLED if isinstance(error, RequestCancelled)
                   else FinishReason.ERROR)
    try:
      self.publish([], final=True)
    except Exception:  # noqa: BLE001
      pass

  def check_stop_strings(self) -> bool:
    """Unconstrained rows: truncates the text at the first extra stop string, if any."""
    if not self.request.stop:
      return False
    text = "".join(self.text_parts)
    hits = [text.find(s) for s in self.request.stop if s and s in text]
    if not hits:
      return False
    self.text_parts = [text[:min(hits)]]
    return True

  def result(self) -> GenerationResult:
    """The final result (after `finish` is set)."""
    report = self.report
    if report is not None and self.session is not None:
      report.complete = bool(self.session.complete)
      report.terminated = bool(self.session.terminated)
      report.branch = str(getattr(self.session, "branch", report.branch))  # framed sessions
    err = self.error
    result = GenerationResult(
        request_id=self.request.request_id, token_ids=list(self.output),
        text="".join(self.text_parts), finish_reason=self.finish or FinishReason.ERROR,
        prompt_tokens=len(self.request.prompt_ids), error=str(err) if err else None,
        error_kind=err.kind if err else None, constraint=report, rounds=list(self.rounds),
        wall_seconds=time.perf_counter() - self.t_start, thinking_forced_close=self.forced_close,
        min_tokens_unmet=self.min_tokens_unmet,
        logprobs=list(self.logprobs) if self.logprobs is not None else None)
    if self.trace is not None:
      result.trace = self.trace.to_json(result)
    return result
