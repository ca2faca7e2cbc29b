"""OpenAI request bodies -> `LLM.prepare` options, every field checked and named on error.

Chat (`/v1/chat/completions`) and text (`/v1/completions`) bodies share the sampling fields
and the constraint fields: `response_format` (OpenAI) and `structured_outputs` (vLLM's
names: json, regex, choice, grammar, json_object), and `sampling_law` ("local" |
"exact-finite" | "onestep") with `law_tolerance`: `LLM.prepare`. `trace: true` asks for the
generation trace (returned as the response's `trace` field; docs/CONTRACTS.md). Speculative options ride in
`speculative: {"drafter": NAME, "k": K}`; the server's drafter is fixed at start-up, so a
request may lower K (or ask for "none") but not switch drafters.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from infernix_jax.api import RequestError

_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
             "frequency_penalty")
_COMMON = frozenset(_SAMPLING + (
    "model", "max_tokens", "stream", "stream_options", "stop", "n", "response_format",
    "structured_outputs", "speculative", "user", "logprobs", "top_logprobs", "echo",
    "logit_bias", "thinking_budget", "sampling_law", "law_tolerance", "trace"))
CHAT_FIELDS = _COMMON | {"messages", "tools", "tool_choice", "max_completion_tokens",
                         "parallel_tool_calls"}
TEXT_FIELDS = _COMMON | {"prompt", "suffix", "best_of"}
_STRUCTURED = ("json", "regex", "choice", "grammar", "json_object")


@dataclasses.dataclass
class ParsedRequest:
  """A request body, translated.

  Attributes:
    prompt: the user prompt (str), the chat messages (list of dicts) or token ids.
    options: `LLM.prepare` keyword arguments.
    stream: answer with server-sent events.
    include_usage: a final usage chunk when streaming.
    max_drafts: the request's draft cap (None = the server's K).
    fields: the body field each option came from ("json_schema" ->
      "response_format.json_schema.schema"), so errors found later name what the client sent.
  """
  prompt: Any
  options: dict
  stream: bool = False
  include_usage: bool = False
  max_drafts: int | None = None
  fields: dict = dataclasses.field(default_factory=dict)

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


def _unknown(body: Mapping, allowed: frozenset, where: str = "") -> None:
  extra = sorted(set(body) - allowed)
  if extra:
    raise RequestError(f"{where}{extra[0]}", "unsupported parameter")


def _constraint(body: Mapping, fields: dict) -> dict:
  """The constraint options of response_format / structured_outputs (`fields` records where
  each came from)."""
  out: dict = {}
  fmt = body.get("response_format")
  if fmt is not None:
    if not isinstance(fmt, Mapping) or "type" not in fmt:
      raise RequestError("response_format", "expected an object with a 'type'")
    kind = fmt["type"]
    if kind == "json_object":
      out["json_object"] = True
      fields["json_object"] = "response_format"
    elif kind == "json_schema":
      spec = fmt.get("json_schema")
      if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), (Mapping, bool)):
        raise RequestError("response_format.json_schema.schema",
                           "expected a JSON Schema object")
      out["json_schema"] = spec["schema"]
      fields["json_schema"] = "response_format.json_schema.schema"
    elif kind != "text":
      raise RequestError("response_format.type", f"{kind!r} must be text, json_object or "
                         f"json_schema")
  so = body.get("structured_outputs")
  if so is not None:
    if not isinstance(so, Mapping):
      raise RequestError("structured_outputs", "expected an object")
    _unknown(so, frozenset(_STRUCTURED), "structured_outputs.")
    given = [k for k in _STRUCTURED if so.get(k) not in (None, False)]
    if len(given) > 1 or (given and out):
      names = [f"structured_outputs.{k}" for k in given] + (["response_format"] if out else [])
      raise RequestError(names[-1], f"give one output constraint, got {' and '.join(names)}")
    if given:
      key = given[0]
      value = so[key]
      option = {"json": "json_schema"}.get(key, key)
      fields[option] = f"structured_outputs.{key}"
      if option == "json_schema":
        fields["lenient"] = fields[option]
      if key == "json":
        if isinstance(value, str):
          try:
            value = json.loads(value)
          except json.JSONDecodeError as e:
            raise RequestError("structured_outputs.json", f"not JSON: {e.msg} (at line "
                               f"{e.lineno} column {e.colno})") from None
        out["json_schema"] = value
      elif key == "json_object":
        out["json_object"] = True
      else:
        out[key] = value
  return out


def _speculative(body: Mapping, drafter: str, k: int) -> int | None:
  spec = body.get("speculative")
  if spec is None:
    return None
  if not isinstance(spec, Mapping):
    raise RequestError("speculative", "expected an object {drafter, k}")
  _unknown(spec, frozenset({"drafter", "k"}), "speculative.")
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


def _common(body: Mapping, drafter: str, k: int,
            fields: dict) -> tuple[dict, int | None]:
  opts: dict = {}
  if body.get("n", 1) != 1:
    raise RequestError("n", "only n=1 is supported")
  for name in ("logprobs", "top_logprobs", "echo", "logit_bias", "suffix"):
    if body.get(name) not in (None, False, 0, {}):
      raise RequestError(name, "not supported by this server")
  if body.get("best_of") not in (None, 1):
    raise RequestError("best_of", "only best_of=1 is supported")
  for name, kind, low, high in (("temperature", float, 0, 100), ("top_p", float, 0, 1),
                                ("top_k", int, 0, None), ("min_p", float, 0, 1),
                                ("seed", int, 0, 2**32 - 1),
                                ("presence_penalty", float, -2, 2),
                                ("frequency_penalty", float, -2, 2)):
    value = _number(body, name, kind, low, high)
    if value is not None:
      opts[name] = value
  stop = body.get("stop")
  if stop is not None:
    if isinstance(stop, str):
      stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
      raise RequestError("stop", "expected a non-empty string or a list of them")
    if stop:
      opts["stop"] = stop
  if body.get("sampling_law") is not None:  # checked with the request (GenerationRequest)
    opts["sampling_law"] = body["sampling_law"]
  tolerance = _number(body, "law_tolerance", float, 0.0, None)
  if tolerance is not None:
    opts["law_tolerance"] = tolerance
  if body.get("trace") is not None:
    if not isinstance(body["trace"], bool):
      raise RequestError("trace", f"expected true or false, got {json.dumps(body['trace'])[:40]}")
    opts["trace"] = body["trace"]
  budget = _number(body, "thinking_budget", int, 0, None)
  if budget is not None:
    opts["thinking_budget"] = budget
  opts.update(_constraint(body, fields))
  return opts, _speculative(body, drafter, k)


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


def parse_chat(body: Any, *, drafter: str, k: int) -> ParsedRequest:
  """A /v1/chat/completions body.

  Raises:
    RequestError: a field is missing, malformed or unsupported (named in `.param`).
  """
  if not isinstance(body, Mapping):
    raise RequestError("body", "expected a JSON object")
  _unknown(body, CHAT_FIELDS)
  fields = {"prompt": "messages"}
  opts, cap = _common(body, drafter, k, fields)
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
      opts["tools"] = tools
      opts["tool_choice"] = choice
    elif body.get("tool_choice") not in (None, "none", "auto"):
      raise RequestError("tool_choice", "needs tools")
  elif body.get("tool_choice") not in (None, "none", "auto"):
    raise RequestError("tool_choice", "needs tools")
  stream = bool(body.get("stream", False))
  usage = bool((body.get("stream_options") or {}).get("include_usage", False))
  return ParsedRequest(prompt=_messages(body), options=opts, stream=stream,
                       include_usage=usage, max_drafts=cap, fields=fields)


def parse_text(body: Any, *, drafter: str, k: int) -> ParsedRequest:
  """A /v1/completions body (a raw text continuation; no chat template).

  Raises:
    RequestError: as `parse_chat`.
  """
  if not isinstance(body, Mapping):
    raise RequestError("body", "expected a JSON object")
  _unknown(body, TEXT_FIELDS)
  fields: dict = {}
  opts, cap = _common(body, drafter, k, fields)
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
  return ParsedRequest(prompt=prompt, options=opts, stream=stream, include_usage=usage,
                       max_drafts=cap, fields=fields)
