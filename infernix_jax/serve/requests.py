"""OpenAI request bodies -> `LLM.prepare` options, every field checked and named on error.

Chat (`/v1/chat/completions`) and text (`/v1/completions`) bodies share the sampling fields
and the constraint fields: `response_format` (OpenAI; `json_schema.strict`, default the
server's `strict`, closes objects: `schemas.close`; a `schema` beside `json_object` is
enforced as `json_schema`), `structured_outputs` (vLLM's names:
json, regex, choice, grammar, json_object, with disable_additional_properties, lenient and
whitespace_pattern) and vLLM's legacy `guided_json` / `guided_regex` / `guided_choice` /
`guided_grammar`; `sampling_law` ("local" | "exact-finite" | "onestep") with
`law_tolerance`: `LLM.prepare`. `trace: true` asks for the generation trace (the response's
`trace` field; docs/CONTRACTS.md). Speculative options ride in `speculative: {"drafter":
NAME, "k": K}`; the server's drafter is fixed at start-up, so a request may lower K (or ask
for "none") but not switch drafters. vLLM's `repetition_penalty`, `min_tokens` and
`ignore_eos` have their real meaning (`LLM.prepare`); `logprobs` / `top_logprobs` (up to 20)
are the engine's exact per-token log-probabilities. Fields in `IGNORED` do not change what is
decoded: they are accepted and logged at debug; any other unknown field gets a 400.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from absl import logging

from infernix_jax.api import RequestError
from infernix_jax.runtime.types import MAX_LOGPROBS
from infernix_jax.serve import schemas

# `runtime.SamplingOptions` fields by their JSON type (ranges: `SamplingOptions.validate`).
_SAMPLING_KINDS = {"temperature": float, "top_p": float, "top_k": int, "min_p": float,
                   "seed": int, "presence_penalty": float, "frequency_penalty": float,
                   "repetition_penalty": float}
_SAMPLING = (*_SAMPLING_KINDS, "min_tokens", "ignore_eos")
# Accepted and ignored: they steer storage, billing, routing or tracing, not decoding
# (reasoning_effort is ignored on a model without thinking; on one, see `_thinking`).
IGNORED = frozenset({"metadata", "store", "user", "service_tier", "prompt_cache_key",
                     "safety_identifier", "verbosity", "modalities", "priority",
                     "reasoning_effort"})
# vLLM's extras whose default is what this server does; other values need the runtime.
_VLLM_DEFAULTS = {"skip_special_tokens": True, "spaces_between_special_tokens": True}
_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
           "guided_grammar": "grammar"}
_COMMON = frozenset(_SAMPLING + (
    "model", "max_tokens", "stream", "stream_options", "stop", "n", "response_format",
    "structured_outputs", "speculative", "logprobs", "top_logprobs", "echo",
    "logit_bias", "thinking_budget", "sampling_law", "law_tolerance", "trace",
    "chat_template_kwargs", "max_tool_calls")) | IGNORED | set(_VLLM_DEFAULTS) | set(_GUIDED)
CHAT_FIELDS = _COMMON | {"messages", "tools", "tool_choice", "max_completion_tokens",
                         "parallel_tool_calls"}
TEXT_FIELDS = _COMMON | {"prompt", "suffix", "best_of"}
_STRUCTURED = ("json", "regex", "choice", "grammar", "json_object")
_STRUCTURED_FLAGS = ("disable_additional_properties", "lenient", "whitespace_pattern")
MAX_N = 16  # choices per request (each takes a lane)
# reasoning_effort on a thinking model -> thinking_budget (None: unbounded)
REASONING_BUDGETS = {"low": 256, "medium": 1024, "high": None}


@dataclasses.dataclass(frozen=True)
class Defaults:
  """The server's defaults for what a request may leave out.

  Attributes:
    strict: json_schema objects are closed unless the request says `strict: false`.
    lenient: unenforceable JSON Schema keywords are dropped (and reported) unless the request
      says `structured_outputs.lenient: false`.
    thinking: the model has a thinking block (`enable_thinking` in its chat template), so
      `reasoning_effort` and `chat_template_kwargs.enable_thinking` change its decoding.
    max_tool_calls: calls per turn when the request does not cap them (None: no cap).
  """
  strict: bool = True
  lenient: bool = False
  thinking: bool = False
  max_tool_calls: int | None = None


@dataclasses.dataclass
class ParsedRequest:
  """A request body, translated.

  Attributes:
    prompt: the user prompt (str), the chat messages (list of dicts) or token ids.
    options: `LLM.prepare` keyword arguments (plus "lenient", which `schemas.prepare` takes).
    stream: answer with server-sent events.
    include_usage: a final usage chunk when streaming.
    max_drafts: the request's draft cap (None = the server's K).
    fields: the body field each option came from ("json_schema" ->
      "response_format.json_schema.schema"), so errors found later name what the client sent.
    n: choices to generate (independent seeds: seed, seed + 1, ...).
    logprobs: top alternatives to report per token (0: the token's own only), None: off.
    max_tool_calls: complete calls kept per turn (None: no cap).
    ignored: body fields accepted without effect.
    trace: the client asked for the generation trace.
  """
  prompt: Any
  options: dict
  stream: bool = False
  include_usage: bool = False
  max_drafts: int | None = None
  fields: dict = dataclasses.field(default_factory=dict)
  n: int = 1
  logprobs: int | None = None
  max_tool_calls: int | None = None
  ignored: tuple = ()
  trace: bool = False  # the client asked for the trace

  def field(self, option: str) -> str:
    """The body field of an `LLM.prepare` option (the option's own name when not mapped)."""
    return self.fields.get(option, option)


def _number(body: Mapping, name: str, kind=float, low=None, high=None):
  value = body.get(name)
  if value is None:
    return None
  ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  if kind is int:
    ok = ok and float(value).is_integer()
  if not ok:
    raise RequestError(name, f"expected {'an integer' if kind is int else 'a number'}, got "
                       f"{json.dumps(value)[:40]}")
  if (low is not None and value < low) or (high is not None and value > high):
    raise RequestError(name, f"{value} must be in [{low}, {high}]")
  return kind(value)


def _flag(value, name: str) -> bool | None:
  if value is None or isinstance(value, bool):
    return value
  raise RequestError(name, f"expected true or false, got {json.dumps(value)[:40]}")


def _unknown(body: Mapping, allowed: frozenset, where: str = "") -> None:
  extra = sorted(set(body) - allowed)
  if extra:
    raise RequestError(f"{where}{extra[0]}", "unsupported parameter (it would change the "
                       "output, and this server does not implement it)")


def _schema(value, where: str):
  if isinstance(value, str):
    try:
      value = json.loads(value)
    except json.JSONDecodeError as e:
      raise RequestError(where, f"not JSON: {e.msg} (at line {e.lineno} column {e.colno})"
                         ) from None
  if not isinstance(value, (Mapping, bool)):
    raise RequestError(where, "expected a JSON Schema object")
  return value


def _constraint(body: Mapping, fields: dict, defaults: Defaults) -> dict:
  """The constraint options of response_format / structured_outputs / guided_* (`fields`
  records where each came from)."""
  out: dict = {}
  strict = defaults.strict
  fmt = body.get("response_format")
  if fmt is not None:
    if not isinstance(fmt, Mapping) or "type" not in fmt:
      raise RequestError("response_format", "expected an object with a 'type'")
    kind = fmt["type"]
    if kind == "json_object" and fmt.get("schema") is not None:
      # A schema beside json_object (instructor's JSON_SCHEMA mode before it sent
      # json_schema, and servers that honour the extension): enforced as json_schema.
      out["json_schema"] = _schema(fmt["schema"], "response_format.schema")
      fields["json_schema"] = "response_format.schema"
    elif kind == "json_object":
      out["json_object"] = True
      fields["json_object"] = "response_format"
    elif kind == "json_schema":
      spec = fmt.get("json_schema")
      if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), (Mapping, bool)):
        raise RequestError("response_format.json_schema.schema",
                           "expected a JSON Schema object")
      given = _flag(spec.get("strict"), "response_format.json_schema.strict")
      strict = strict if given is None else given
      out["json_schema"] = spec["schema"]
      fields["json_schema"] = "response_format.json_schema.schema"
    elif kind != "text":
      raise RequestError("response_format.type", f"{kind!r} must be text, json_object or "
                         f"json_schema")
  so = body.get("structured_outputs")
  if so is not None and not isinstance(so, Mapping):
    raise RequestError("structured_outputs", "expected an object")
  so = dict(so or {})
  prefix = {k: "structured_outputs." for k in so}
  for old, new in _GUIDED.items():
    if body.get(old) is not None:
      so[new] = body[old]
      prefix[new] = ""
  _unknown(so, frozenset(_STRUCTURED + _STRUCTURED_FLAGS), "structured_outputs.")
  name = lambda key: f"{prefix[key]}{key}" if prefix.get(key) else next(
      old for old, new in _GUIDED.items() if new == key)
  given = [k for k in _STRUCTURED if so.get(k) not in (None, False)]
  if len(given) > 1 or (given and out):
    names = [name(k) for k in given] + (["response_format"] if out else [])
    raise RequestError(names[-1], f"give one output constraint, got {' and '.join(names)}")
  if given:
    key = given[0]
    value = so[key]
    option = {"json": "json_schema"}.get(key, key)
    fields[option] = name(key)
    if key == "json":
      out["json_schema"] = _schema(value, name(key))
    elif key == "json_object":
      out["json_object"] = True
    else:
      out[key] = value
  if so.get("whitespace_pattern") not in (None, ""):
    raise RequestError("structured_outputs.whitespace_pattern", "only null is supported "
                       "(JSON whitespace runs of at most 32 characters between tokens)")
  closed = _flag(so.get("disable_additional_properties"),
                 "structured_outputs.disable_additional_properties")
  if closed:
    strict = True
  lenient = _flag(so.get("lenient"), "structured_outputs.lenient")
  lenient = defaults.lenient if lenient is None else lenient
  fields["lenient"] = "structured_outputs.lenient"
  if "json_schema" in out:
    if strict:
      out["json_schema"] = schemas.close(out["json_schema"])
    if lenient:
      out["lenient"] = True
  elif so.get("lenient"):
    raise RequestError("structured_outputs.lenient", "applies to JSON Schema constraints only")
  return out


def _speculative(body: Mapping, drafter: str, k: int, opts: dict) -> int | None:
  """The request's draft cap from `speculative: {drafter, k, history}`; `history` (a name,
  "auto" or null: keep out) goes to opts as the suffix drafter's draft_history."""
  spec = body.get("speculative")
  if spec is None:
    return None
  if not isinstance(spec, Mapping):
    raise RequestError("speculative", "expected an object {drafter, k, history}")
  _unknown(spec, frozenset({"drafter", "k", "history"}), "speculative.")
  if "history" in spec:
    if spec["history"] is not None and not (isinstance(spec["history"], str)
                                            and spec["history"]):
      raise RequestError("speculative.history", "expected a history name, \"auto\" or null "
                         "(this request neither reads nor adds to a shared draft history)")
    opts["draft_history"] = spec["history"]
  cap = None
  name = spec.get("drafter")
  if name is not None and name not in (drafter, "none"):
    raise RequestError("speculative.drafter", f"this server drafts with {drafter!r} "
                       f"(start it with --drafter to change); a request may ask for "
                       f"{drafter!r} or 'none'")
  if name == "none":
    cap = 0
  if spec.get("k") is not None:
    want = _number({"speculative.k": spec["k"]}, "speculative.k", int, 0, k)
    cap = want if cap is None else min(cap, want)
  return cap


def _thinking(body: Mapping, opts: dict, defaults: Defaults) -> None:
  """chat_template_kwargs (template variables) and reasoning_effort (a thinking budget)."""
  kwargs = body.get("chat_template_kwargs")
  if kwargs is not None:
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
      raise RequestError("chat_template_kwargs", "expected an object of template variables")
    _flag(kwargs.get("enable_thinking"), "chat_template_kwargs.enable_thinking")
    opts["chat_template_kwargs"] = dict(kwargs)
  effort = body.get("reasoning_effort")
  if effort is None or not defaults.thinking:
    return
  if effort in ("none", "minimal"):
    opts["chat_template_kwargs"] = {**opts.get("chat_template_kwargs", {}),
                                    "enable_thinking": False}
  elif effort in REASONING_BUDGETS:
    if REASONING_BUDGETS[effort] is not None and "thinking_budget" not in opts:
      opts["thinking_budget"] = REASONING_BUDGETS[effort]
  else:
    raise RequestError("reasoning_effort", f"{effort!r} must be none, minimal, low, medium or "
                       f"high")


def _sampling_rules(opts: Mapping) -> None:
  """The library's sampling rules (`SamplingOptions.validate`: ranges and messages written
  once) on the body's sampling fields, which keep the library's names.

  Raises:
    RequestError: the field at fault, with the library's message.
  """
  from infernix_jax.runtime.types import SamplingOptions
  SamplingOptions(**{name: opts[name] for name in _SAMPLING_KINDS if name in opts}).validate()


def _common(body: Mapping, drafter: str, k: int, fields: dict,
            defaults: Defaults) -> tuple[dict, int | None]:
  opts: dict = {}
  for name in ("echo", "logit_bias", "suffix"):
    if body.get(name) not in (None, False, {}, ""):
      raise RequestError(name, "not supported by this server")
  if body.get("best_of") not in (None, 1):
    raise RequestError("best_of", "only best_of=1 is supported")
  for name, default in _VLLM_DEFAULTS.items():
    if body.get(name) is not None and body[name] != default:
      raise RequestError(name, f"only {json.dumps(default)} is supported (the engine has no "
                         f"{name} yet)")
  for name, kind in _SAMPLING_KINDS.items():
    value = _number(body, name, kind)
    if value is not None:  # a number as sent (messages quote it), an integer as an int
      opts[name] = value if kind is int else body[name]
  _sampling_rules(opts)
  min_tokens = _number(body, "min_tokens", int, 0, None)  # <= max_tokens: the request's rule
  if min_tokens is not None:
    opts["min_tokens"] = min_tokens
  if body.get("ignore_eos") is not None:
    opts["ignore_eos"] = _flag(body["ignore_eos"], "ignore_eos")
  stop = body.get("stop")
  if stop is not None:
    if isinstance(stop, str):
      stop = [stop]
    if not isinstance(stop, list):
      raise RequestError("stop", "expected a string or a list of strings")
    from infernix_jax.runtime.types import check_stop
    check_stop(stop)
    if stop:
      opts["stop"] = stop
  if body.get("sampling_law") is not None:  # checked with the request (GenerationRequest)
    opts["sampling_law"] = body["sampling_law"]
  tolerance = _number(body, "law_tolerance", float, 0.0, None)
  if tolerance is not None:
    opts["law_tolerance"] = tolerance
  if body.get("trace") is not None:
    opts["trace"] = _flag(body["trace"], "trace")
  budget = _number(body, "thinking_budget", int, 0, None)
  if budget is not None:
    opts["thinking_budget"] = budget
  _thinking(body, opts, defaults)
  opts.update(_constraint(body, fields, defaults))
  return opts, _speculative(body, drafter, k, opts)


def _extras(body: Mapping, parsed: "ParsedRequest", defaults: Defaults,
            logprobs_field: str) -> "ParsedRequest":
  """n, logprobs, max_tool_calls and the ignored fields onto `parsed`."""
  parsed.n = _number(body, "n", int, 1, MAX_N) or 1
  top = _number(body, "top_logprobs", int, 0, MAX_LOGPROBS)
  want = body.get(logprobs_field)
  if logprobs_field == "logprobs" and parsed.options.get("chat") is False:
    count = _number(body, "logprobs", int, 0, MAX_LOGPROBS)  # text: an integer
    parsed.logprobs = count
  elif _flag(want, "logprobs"):
    parsed.logprobs = top or 0
  elif top:
    raise RequestError("top_logprobs", "needs logprobs: true")
  parsed.trace = bool(parsed.options.get("trace"))
  if parsed.logprobs is not None:
    parsed.options["logprobs"] = parsed.logprobs  # the engine's exact per-token logprobs
  cap = _number(body, "max_tool_calls", int, 1, None)
  parsed.max_tool_calls = cap if cap is not None else defaults.max_tool_calls
  parsed.ignored = tuple(sorted(IGNORED & set(body)))
  if parsed.ignored:
    logging.debug("ignored request fields: %s", ", ".join(parsed.ignored))
  return parsed


def _messages(body: Mapping) -> list[dict]:
  messages = body.get("messages")
  if not isinstance(messages, list) or not messages:
    raise RequestError("messages", "expected a non-empty list of messages")
  out = []
  for i, m in enumerate(messages):
    where = f"messages[{i}]"
    if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
      raise RequestError(where, "expected an object with a 'role'")
    if m["role"] not in ("system", "developer", "user", "assistant", "tool"):
      raise RequestError(f"{where}.role", f"{m['role']!r} must be system, user, assistant or "
                         f"tool")
    content = m.get("content")
    if isinstance(content, list):
      parts = []
      for j, part in enumerate(content):
        if not isinstance(part, Mapping) or part.get("type") != "text":
          raise RequestError(f"{where}.content[{j}]", "only text parts are supported")
        parts.append(str(part.get("text", "")))
      content = "".join(parts)
    elif content is None:
      if m["role"] != "assistant" or not m.get("tool_calls"):
        raise RequestError(f"{where}.content", "is missing")
      content = ""
    elif not isinstance(content, str):
      raise RequestError(f"{where}.content", "expected a string or a list of text parts")
    msg = {"role": "system" if m["role"] == "developer" else m["role"], "content": content}
    for key in ("tool_calls", "tool_call_id", "name"):
      if m.get(key) is not None:
        msg[key] = m[key]
    if "tool_calls" in msg:
      msg["tool_calls"] = [_readable_call(c, f"{where}.tool_calls[{j}]")
                           for j, c in enumerate(msg["tool_calls"])]
    out.append(msg)
  return out


def _readable_call(call, where: str) -> dict:
  """An assistant message's tool call, with its arguments as an object for the template."""
  if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
    raise RequestError(where, "expected {type: function, function: {name, arguments}}")
  fn = dict(call["function"])
  args = fn.get("arguments")
  if isinstance(args, str):
    try:
      fn["arguments"] = json.loads(args) if args else {}
    except json.JSONDecodeError:
      raise RequestError(f"{where}.function.arguments", "not JSON text") from None
  return {**call, "function": fn}


def _tool_choice(choice, parallel: Any):
  """The ToolChoice of tool_choice and parallel_tool_calls (OpenAI's default: parallel)."""
  from infernix_jax.constrain.framing import ToolChoice
  if parallel is not None and not isinstance(parallel, bool):
    raise RequestError("parallel_tool_calls", "expected true or false")
  kw = {} if parallel is None else {"parallel": parallel}
  if choice is None or choice in ("auto", "none", "required"):
    return ToolChoice.parse(choice, **kw)
  if (isinstance(choice, Mapping) and choice.get("type") == "function"
      and isinstance(choice.get("function"), Mapping)
      and isinstance(choice["function"].get("name"), str)):
    return ToolChoice.parse(choice["function"]["name"], **kw)
  raise RequestError("tool_choice", "expected auto, none, required or {type: function, "
                     "function: {name}}")


def parse_chat(body: Any, *, drafter: str, k: int,
               defaults: Defaults = Defaults()) -> ParsedRequest:
  """A /v1/chat/completions body.

  Raises:
    RequestError: a field is missing, malformed or unsupported (named in `.param`).
  """
  if not isinstance(body, Mapping):
    raise RequestError("body", "expected a JSON object")
  _unknown(body, CHAT_FIELDS)
  fields = {"prompt": "messages"}
  opts, cap = _common(body, drafter, k, fields, defaults)
  tokens = body.get("max_completion_tokens", body.get("max_tokens"))
  name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
  fields["max_tokens"] = name
  if tokens is not None:
    opts["max_tokens"] = _number({name: tokens}, name, int, 1, None)
  tools = body.get("tools")
  if tools is not None:
    if not isinstance(tools, list):
      raise RequestError("tools", "expected a list of function definitions")
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if tools:
      opts["tools"] = schemas.strict_tools(tools)
      opts["tool_choice"] = choice
    elif body.get("tool_choice") not in (None, "none", "auto"):
      raise RequestError("tool_choice", "needs tools")
  elif body.get("tool_choice") not in (None, "none", "auto"):
    raise RequestError("tool_choice", "needs tools")
  stream = bool(body.get("stream", False))
  usage = bool((body.get("stream_options") or {}).get("include_usage", False))
  parsed = ParsedRequest(prompt=_messages(body), options=opts, stream=stream,
                         include_usage=usage, max_drafts=cap, fields=fields)
  return _extras(body, parsed, defaults, "logprobs")


def parse_text(body: Any, *, drafter: str, k: int,
               defaults: Defaults = Defaults()) -> ParsedRequest:
  """A /v1/completions body (a raw text continuation; no chat template).

  Raises:
    RequestError: as `parse_chat`.
  """
  if not isinstance(body, Mapping):
    raise RequestError("body", "expected a JSON object")
  _unknown(body, TEXT_FIELDS)
  fields: dict = {}
  opts, cap = _common(body, drafter, k, fields, defaults)
  opts.pop("chat_template_kwargs", None)
  prompt = body.get("prompt")
  if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
    prompt = prompt[0]
  if not ((isinstance(prompt, str) and prompt) or (
      isinstance(prompt, list) and prompt
      and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt))):
    raise RequestError("prompt", "expected a non-empty string (or one list of token ids)")
  opts["max_tokens"] = _number(body, "max_tokens", int, 1, None) or 16
  opts["chat"] = False
  stream = bool(body.get("stream", False))
  usage = bool((body.get("stream_options") or {}).get("include_usage", False))
  parsed = ParsedRequest(prompt=prompt, options=opts, stream=stream, include_usage=usage,
                         max_drafts=cap, fields=fields)
  return _extras(body, parsed, defaults, "logprobs")
