"""Request and result types of the engine (DESIGN.md section 8)."""

from __future__ import annotations

import dataclasses
import enum
import itertools
from typing import Any, Callable, Sequence

from infernix_jax.errors import ParameterError, RequestConflictError

__all__ = [
    "BRIDGES",
    "ConstraintReport",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "RoundStat",
    "SamplingOptions",
    "TokenEvent",
    "TokenLogprob",
    "accepted_length",
    "check_bridge",
]

_IDS = itertools.count()
MAX_LOGPROBS = 20  # alternatives per token GenerationRequest.logprobs may ask for
BRIDGES = ("stages", "callback")  # the round's host bridges (`runtime.Engine`'s bridge)


def check_bridge(bridge: str, *, logprobs: int | None = None, trace: bool = False,
                 sampling_law: str = "local") -> None:
  """The request features a bridge cannot run: the callback bridge's compiled loop runs no
  logprobs or trace step and uploads no sampling-law bias, so those need the stages bridge.

  Args:
    bridge: one of `BRIDGES`.
    logprobs, trace, sampling_law: the request's fields of those names.

  Raises:
    RequestConflictError: `param` names the first field that needs the stages bridge.
  """
  if bridge == "stages":
    return
  got = f"needs the engine's stages bridge (got bridge={bridge!r}): the callback loop"
  if sampling_law != "local":
    raise RequestConflictError("sampling_law", f"sampling_law={sampling_law!r} {got} uploads "
                               f"no sampling-law bias; use bridge='stages' or the local law")
  if trace:
    raise RequestConflictError("trace", f"trace=True {got} runs no trace step; use "
                               f"bridge='stages' or drop trace")
  if logprobs is not None:
    raise RequestConflictError("logprobs", f"logprobs {got} runs no logprobs step; use "
                               f"bridge='stages' or drop logprobs")


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
  """Per-request sampling settings (the target distribution of DESIGN.md section 5)."""

  temperature: float = 0.0  # 0 = greedy (argmax over the legal set, ties to the smaller id)
  top_k: int = 0  # 0 = off; chosen over LEGAL tokens only
  top_p: float = 1.0  # 1 = off
  min_p: float = 0.0  # 0 = off
  presence_penalty: float = 0.0  # subtracted once from each token already in the output
  frequency_penalty: float = 0.0  # subtracted once per occurrence in the output
  seed: int = 0  # counter-based stream: (seed, logical position, purpose)
  # vLLM / HF: every token id in the prompt or the output so far has a positive logit
  # divided by it and a negative one multiplied (before presence / frequency); 1 = off, > 0.
  repetition_penalty: float = 1.0

  def validate(self) -> None:
    """Raises ParameterError naming the first invalid field (every surface's one check)."""
    for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(name, f"{name}={value!r} must be a number")
    for name in ("top_k", "seed"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(name, f"{name}={value!r} must be an integer")
    if not 0 <= self.temperature < float("inf"):  # NaN fails both comparisons
      raise ParameterError("temperature", f"temperature={self.temperature} must be a finite "
                           f"number >= 0 (0 = greedy)")
    if self.top_k < 0:
      raise ParameterError("top_k", f"top_k={self.top_k} must be >= 0 (0 = off)")
    if not 0 < self.top_p <= 1:
      raise ParameterError("top_p", f"top_p={self.top_p} must be in (0, 1]")
    if not 0 <= self.min_p <= 1:
      raise ParameterError("min_p", f"min_p={self.min_p} must be in [0, 1]")
    if not 0 <= self.seed < 2**32:
      raise ParameterError("seed", f"seed={self.seed} must be in [0, 2**32)")
    for name in ("presence_penalty", "frequency_penalty"):
      if not abs(getattr(self, name)) < float("inf"):
        raise ParameterError(name, f"{name}={getattr(self, name)} must be finite")
    if not 0 < self.repetition_penalty < float("inf"):
      raise ParameterError("repetition_penalty", f"repetition_penalty="
                           f"{self.repetition_penalty} must be a finite number > 0 (1 = off)")


def check_stop(stop) -> None:
  """The stop-string rule of every surface (request, API, CLI, server): each a non-empty
  string.

  Raises:
    ParameterError("stop"): an entry that is not a string, or is empty.
  """
  for s in stop:
    if not isinstance(s, str) or not s:
      raise ParameterError("stop", f"stop strings must be non-empty strings, got {s!r} (an "
                           f"empty string would match at every position; leave it out)")


@dataclasses.dataclass(frozen=True)
class TokenEvent:
  """One streaming event: the tokens a round committed for one request."""

  request_id: str
  token_ids: tuple[int, ...]  # committed this round (EOS excluded)
  text: str  # the newly complete UTF-8 text of those tokens
  finished: bool


@dataclasses.dataclass
class GenerationRequest:
  """One generation request.

  The output constraint lives here (`constraint`, an `OutputConstraint`), next to the
  tool-call path (`tools`, `tool_choice`, framed by `constrain.framing`); the engine opens
  every constraint session from a request in one place (`runtime/_session.py`).
  """

  prompt_ids: Sequence[int]
  max_tokens: int = 256
  sampling: SamplingOptions = SamplingOptions()
  constraint: Any = None  # infernix_jax.constrain.OutputConstraint or None
  tools: Any = None  # tool definitions (constrain.framing.parse_tools); None = no tools
  tool_choice: Any = None  # tool policy: auto | none | required | a tool name
  stop: tuple[str, ...] = ()  # extra stop strings; rejected together with a constraint
  request_id: str = ""
  on_token: Callable[[TokenEvent], None] | None = None  # streaming callback
  # Reasoning tokens allowed before the engine appends the canonical close (`\n</think>\n\n`)
  # itself; None = unlimited. Counts the output tokens generated while reasoning.
  thinking_budget: int | None = None
  # Constraint backend by registered name (overrides the constraint's own `backend`);
  # None = the constraint's choice ("auto" by default).
  backend: str | None = None
  # The most drafts one round may take for this request (0 = ordinary decoding); None = the
  # engine's K. Lowering it never changes the output law, only the accepted length.
  max_drafts: int | None = None
  # The output law: "local" samples the target renormalized over the legal tokens at each
  # position (μ_proj); "exact-finite" samples μ*(y) ∝ p(y)·[y ∈ L] over whole outputs of a
  # finite constraint (`infernix_jax.faithful`; greedy = the most probable member);
  # "onestep" weights each token by the legal mass one step after it (an estimate of μ*).
  sampling_law: str = "local"
  # exact-finite only. Greedy always takes the exact most probable member, found best first
  # (`faithful.search`). Sampling: 0 computes Φ over the whole token trie (μ* exactly); a
  # tolerance > 0 expands the trie best first until μ* restricted to the members found is
  # within that total variation of μ* (certified), skipping improbable tokenizations.
  law_tolerance: float = 0.0
  # Record a per-token trace (`runtime.trace`: drafts, verification, origins) into
  # GenerationResult.trace; off by default (untraced requests do no trace work).
  trace: bool = False
  # EOS (every EOS id) is illegal until the output has this many tokens (vLLM's min_tokens;
  # <= max_tokens). Where a constraint allows EOS alone earlier, the constraint decides: the
  # request ends there and GenerationResult.min_tokens_unmet says so. Stop strings are looked
  # for once the output has min_tokens tokens.
  min_tokens: int = 0
  # EOS does not end the request: it is an output token like any other and decoding goes on
  # to max_tokens (vLLM's ignore_eos; min_tokens then bans nothing). Refused with a
  # constraint or tools: a grammar that accepted EOS has no continuation.
  ignore_eos: bool = False
  # Per output token, its log-probability under the distribution it was sampled from and
  # the `logprobs` most probable alternatives of it (0..MAX_LOGPROBS; None = off: no work);
  # GenerationResult.logprobs, docs/CONTRACTS.md "runtime/".
  logprobs: int | None = None
  # The output history a history drafter (`suffix`) reads and adds to: "auto" (the history
  # of the request's constraint: kind + source, or of its tools; unconstrained requests
  # share one), any other string names a history, None: this request neither reads nor adds.
  draft_history: str | None = "auto"

  def history_key(self) -> str | None:
    """The key of `draft_history` ("auto" resolved from the constraint or the tools)."""
    if self.draft_history != "auto":
      return self.draft_history
    if self.tools is not None:
      names = sorted(str(getattr(t, "name", t)) for t in self.tools)
      return "tools:" + ",".join(names)
    c = self.constraint
    if c is None:
      return "unconstrained"
    import hashlib
    source = c.source if isinstance(c.source, str) else "\x00".join(c.source)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return f"{getattr(c.kind, 'value', c.kind)}:{digest}"

  def __post_init__(self):
    if not self.request_id:
      self.request_id = f"req-{next(_IDS)}"
    self.prompt_ids = tuple(int(t) for t in self.prompt_ids)
    self.stop = tuple(self.stop)

  def validate(self) -> None:
    """Every rule on the request's own fields, written once (the engine, the API, the CLI
    and the server all call it before anything is queued).

    Raises:
      ParameterError: the field at fault in `.param` (sampling fields by their own names).
      RequestConflictError: fields that cannot be combined (also a FeatureConflictError):
        stop strings with a constraint or tools, a sampling law's conditions
        (`faithful`).
    """
    self.sampling.validate()
    if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or (
        self.max_tokens < 1):
      raise ParameterError("max_tokens", f"max_tokens={self.max_tokens!r} must be an integer "
                           f">= 1")
    if not self.prompt_ids:
      raise ParameterError("prompt", "the prompt is empty: give at least one token")
    if not isinstance(self.trace, bool):
      raise ParameterError("trace", f"trace={self.trace!r} must be true or false")
    if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) or not (
        0 <= self.min_tokens <= self.max_tokens):
      raise ParameterError("min_tokens", f"min_tokens={self.min_tokens!r} must be an integer "
                           f"in [0, max_tokens={self.max_tokens}]")
    if not isinstance(self.ignore_eos, bool):
      raise ParameterError("ignore_eos", f"ignore_eos={self.ignore_eos!r} must be true or "
                           f"false")
    if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(
        self.logprobs, int) or not 0 <= self.logprobs <= MAX_LOGPROBS):
      raise ParameterError("logprobs", f"logprobs={self.logprobs!r} must be None or an "
                           f"integer in [0, {MAX_LOGPROBS}] (alternatives per token)")
    if self.ignore_eos and (self.constraint is not None or self.tools is not None):
      from infernix_jax.errors import RequestConflictError
      raise RequestConflictError(
          "ignore_eos", "ignore_eos=True cannot be combined with an output constraint or tools: "
          "once the grammar accepts EOS the output is complete and has no legal "
          "continuation; drop ignore_eos (use min_tokens to forbid an early end)")
    if self.draft_history is not None and not isinstance(self.draft_history, str):
      raise ParameterError("draft_history", f"draft_history={self.draft_history!r} must be "
                           f"'auto', a history name or None (no history)")
    for name in ("thinking_budget", "max_drafts"):
      value = getattr(self, name)
      if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 0):
        raise ParameterError(name, f"{name}={value!r} must be an integer >= 0 or None")
    check_stop(self.stop)
    if self.stop and (self.constraint is not None or self.tools is not None):
      from infernix_jax.errors import RequestConflictError
      raise RequestConflictError(
          "stop", "extra stop strings cannot be combined with an output constraint or tools: "
          "a constrained output ends when its grammar accepts EOS; drop the stop strings or "
          "the constraint")
    from infernix_jax.faithful.rules import check_law
    check_law(self)


class FinishReason(str, enum.Enum):
  """Why a request ended."""

  STOP = "stop"  # EOS accepted (a constrained request: terminated)
  LENGTH = "length"  # max_tokens reached
  STOP_STRING = "stop_string"  # an extra stop string appeared (unconstrained only)
  CANCELLED = "cancelled"
  ERROR = "error"  # see GenerationResult.error_kind


@dataclasses.dataclass(frozen=True)
class TokenLogprob:
  """One output token's log-probability and the most probable alternatives (docs/CONTRACTS.md
  "runtime/": the distribution it was sampled from; a token appended by the engine, e.g. a
  thinking-budget close, has logprob 0 and no alternatives)."""

  token_id: int
  logprob: float
  top: tuple[tuple[int, float], ...] = ()  # (id, logprob), most probable first

  def to_list(self) -> list:
    return [self.token_id, self.logprob, [list(x) for x in self.top]]


@dataclasses.dataclass
class RoundStat:
  """One decode round of one request."""

  drafted: int  # drafts proposed for this row (0 = ordinary decoding)
  # Drafts accepted by verification that the output kept (min(accepted, tokens committed)):
  # the round commits accepted + 1 tokens unless EOS or a stop string ends it first.
  accepted: int


def accepted_length(accepted: int, rounds: int) -> float:
  """The accepted length: tokens per target verify round, (accepted + rounds) / rounds.

  Each round counts its `RoundStat.accepted` drafts and one token of the target (the
  correction or bonus): ordinary decoding gives 1.0, K drafts all accepted K + 1. Rounds that
  end a request count as `RoundStat` records them, EOS being a token:
    - the target's EOS as the correction or bonus: accepted drafts + 1, EOS included;
    - an accepted draft that is EOS, or a stop string completed by draft i: the round keeps
      drafts 1..i (accepted = i) and counts i + 1, one token past what it committed;
    - max_tokens: never a cut; the host drafts at most max_tokens - len(output) - 1 tokens, so
      the last round is shorter and counts what it committed.
  EOS is not an output token, so a request that ends on EOS gives more than
  len(token_ids) / rounds.

  Args:
    accepted: `RoundStat.accepted` summed over the rounds (of one request or many).
    rounds: how many rounds.

  Returns:
    (accepted + rounds) / rounds; 0.0 without rounds.
  """
  return (accepted + rounds) / rounds if rounds else 0.0


@dataclasses.dataclass
class ConstraintReport:
  """Constraint state and costs of one request (present when a constraint was active)."""

  kind: str  # grammar / json_object / json_schema / choice / regex
  backend: str = ""  # the constraint backend that compiled it ("auto" resolved)
  branch: str = "content"  # undecided / content / tools
  complete: bool = False  # the committed output may end now
  terminated: bool = False  # EOS was accepted
  cache: str = ""  # compile cache: hit / built / waited
  mask_positions: int = 0  # positions whose masks were computed (rolled-back work counts)
  mask_bytes_uploaded: int = 0
  compile_seconds: float = 0.0
  lookahead_seconds: float = 0.0  # lookahead + mask filling + masked-q redraws
  accept_seconds: float = 0.0  # preview + commit / discard
  jump_forward_tokens: int = 0  # drafts proposed by grammar jump-forward
  pruned_nodes: int = 0  # draft-tree nodes the grammar ruled out before the verify
  # sampling_law other than "local": the token trie (exact-finite) and the target forwards
  # that computed Φ (exact-finite) or Φ̂ (onestep, counted as decoding runs)
  law_trie_nodes: int = 0
  law_forwards: int = 0
  law_tokens: int = 0
  law_seconds: float = 0.0  # trie walk + forwards (0 when the engine's law cache hit)
  law_tv_bound: float = 0.0  # exact-finite: certified TV to μ* of the law sampled (0: exact)
  law_stop: str = ""  # exact-finite: "complete" (whole trie), "greedy" or "tolerance"


  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class GenerationResult:
  """The result of one request (DESIGN.md section 8)."""

  request_id: str
  token_ids: list[int]
  text: str
  finish_reason: FinishReason
  prompt_tokens: int = 0
  error: str | None = None  # message when finish_reason is ERROR or CANCELLED
  error_kind: str | None = None  # GenerationError.kind
  constraint: ConstraintReport | None = None
  rounds: list[RoundStat] = dataclasses.field(default_factory=list)
  wall_seconds: float = 0.0  # submit to finish (queue wait, prefill and decoding)
  thinking_forced_close: bool = False  # the thinking budget closed the reasoning block
  # The request ended on EOS before min_tokens: its constraint allowed EOS alone there.
  min_tokens_unmet: bool = False
  # GenerationRequest.logprobs: one TokenLogprob per output token; None when not asked for.
  logprobs: list["TokenLogprob"] | None = dataclasses.field(default=None, repr=False)
  # The request's trace (GenerationRequest.trace): a JSON-ready dict, docs/CONTRACTS.md
  # "Generation traces"; None when not asked for. Not part of `to_dict`.
  trace: dict | None = dataclasses.field(default=None, repr=False)

  @property
  def drafted(self) -> int:
    return sum(r.drafted for r in self.rounds)

  @property
  def accepted(self) -> int:
    return sum(r.accepted for r in self.rounds)

  @property
  def accepted_length(self) -> float:
    """Tokens per round: `accepted_length` of this request's rounds (1 = ordinary)."""
    return accepted_length(self.accepted, len(self.rounds))

  @property
  def acceptance_rate(self) -> float:
    return self.accepted / self.drafted if self.drafted else 0.0

  @property
  def tokens_per_second(self) -> float:
    return len(self.token_ids) / self.wall_seconds if self.wall_seconds > 0 else 0.0

  def to_dict(self) -> dict:
    """A JSON-ready dict (the CLI's --json-out)."""
    return {
        "request_id": self.request_id,
        "text": self.text,
        "token_ids": list(self.token_ids),
        "finish_reason": self.finish_reason.value,
        "error": self.error,
        "error_kind": self.error_kind,
        "prompt_tokens": self.prompt_tokens,
        "constraint": self.constraint.to_dict() if self.constraint else None,
        "thinking_forced_close": self.thinking_forced_close,
        "min_tokens_unmet": self.min_tokens_unmet,
        "logprobs": None if self.logprobs is None else [x.to_list() for x in self.logprobs],
        "stats": {
            "rounds": len(self.rounds),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "accepted_length": self.accepted_length,
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_second": self.tokens_per_second,
            "wall_seconds": self.wall_seconds,
            "per_round": [[r.drafted, r.accepted] for r in self.rounds],
        },
    }
