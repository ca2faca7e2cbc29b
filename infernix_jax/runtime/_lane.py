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
  text: str = ""  # the decoded output text (cut at an extra stop string when one ended it)
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
  committed: int = 0  # tokens the host's commits counted into the cache (EOS included)

  def __post_init__(self):
    self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
    self._stops = tuple(x for x in self.request.stop if x)
    self._sent = 0  # characters of `text` streamed
    self._search_from = 0  # no stop string starts before this character of `text`
    self._stop_at: int | None = None  # the text ends here: the first stop string starts here
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
  def kv_length(self) -> int:
    """The lane's committed KV length as the host's counts make it (the device's
    DecodeState holds the same; the host uses it only to pick an attention span)."""
    return len(self.request.prompt_ids) - 1 + self.committed

  @property
  def anchor(self) -> int:
    """The last committed token of a lane that goes on (a host drafter's view)."""
    return self.output[-1] if self.output else self.request.prompt_ids[-1]

  @property
  def remaining(self) -> int:
    return self.request.max_tokens - len(self.output)

  def publish(self, tokens: list[int], final: bool) -> None:
    """Appends committed tokens (EOS excluded) and streams them.

    The event's text stops short of any extra stop string: text that a stop string could
    still start in (a suffix that is a prefix of one, or a whole one not looked for yet,
    before min_tokens) is held back until it cannot, or until the final event.
    """
    self.output.extend(tokens)
    if tokens or final:
      self.text += self._utf8.decode(self.vocab.decode(tokens), final=final)
    if self._stop_at is not None:
      self.text = self.text[:self._stop_at]
    end = len(self.text) if final else max(self._sent, self._held_from())
    text, self._sent = self.text[self._sent:end], end
    if self.request.on_token is not None and (tokens or final):
      self.request.on_token(TokenEvent(self.request.request_id, tuple(tokens), text, final))

  def _held_from(self) -> int:
    """The first character of `text` where an extra stop string may still start."""
    text, held = self.text, len(self.text)
    for s in self._stops:
      whole = text.find(s, self._search_from)
      if whole >= 0:
        held = min(held, whole)
      for n in range(min(len(s) - 1, len(text)), 0, -1):
        if s.startswith(text[-n:]):
          held = min(held, len(text) - n)
          break
    return held

  def find_stop(self, tokens: list[int]) -> int | None:
    """Where an extra stop string ends the output within `tokens`, the next output tokens
    (EOS excluded), the way one-token rounds would find it: after each token that brings
    the output to min_tokens or more, the first stop string in the whole text so far.

    Returns:
      The count of `tokens` to keep (through the token that completes the stop string; the
      text will end where that stop string starts), or None when none ends the output.
    """
    if not self._stops:
      return None
    longest = max(len(s) for s in self._stops)
    state, text = self._utf8.getstate(), self.text
    try:
      for j, t in enumerate(tokens):
        text += self._utf8.decode(self.vocab.decode([t]))
        if len(self.output) + j + 1 < self.request.min_tokens:
          continue
        hits = [i for i in (text.find(s, self._search_from) for s in self._stops) if i >= 0]
        if hits:
          self._stop_at = min(hits)
          return j + 1
        self._search_from = max(self._search_from, len(text) - longest + 1)
    finally:
      self._utf8.setstate(state)
    return None

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
        text=self.text, finish_reason=self.finish or FinishReason.ERROR,
        prompt_tokens=len(self.request.prompt_ids), error=str(err) if err else None,
        error_kind=err.kind if err else None, constraint=report, rounds=list(self.rounds),
        wall_seconds=time.perf_counter() - self.t_start, thinking_forced_close=self.forced_close,
        min_tokens_unmet=self.min_tokens_unmet,
        logprobs=list(self.logprobs) if self.logprobs is not None else None)
    if self.trace is not None:
      result.trace = self.trace.to_json(result)
    return result
