"""The Responses API (`POST /v1/responses`) over the chat path: bodies in, response objects out.

`chat_body` turns a Responses body into the chat body `requests.parse_chat` takes (input
string or items: messages, `function_call`, `function_call_output`; `instructions` as the
system turn; `text.format`; function `tools` (strict unless they say `strict: false`, as
the Responses API normalizes them) and `tool_choice`; `max_output_tokens`; the
sampling and extension fields as chat has them). `field` renames a chat field in an error
back to the Responses name. `response` builds the response object of a completion, and
`Events` the streamed event sequence (response.created ... response.completed). Nothing is
stored, so `previous_response_id` is refused.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, Mapping

from infernix_jax.api import RequestError
from infernix_jax.serve import schemas

_IDS = itertools.count()
# Responses fields passed to the chat parser under the same name.
_SAME = ("model", "temperature", "top_p", "top_k", "min_p", "seed", "stream",
         "parallel_tool_calls", "max_tool_calls", "metadata", "store", "user", "service_tier",
         "prompt_cache_key", "safety_identifier", "structured_outputs", "speculative", "trace",
         "presence_penalty", "frequency_penalty", "stop", "sampling_law", "law_tolerance",
         "thinking_budget", "chat_template_kwargs", "top_logprobs", "repetition_penalty",
         "min_tokens", "ignore_eos", "skip_special_tokens")
# Accepted without effect on decoding.
_IGNORED = ("include", "truncation", "background", "prompt", "conversation", "stream_options")
_RENAMES = (("messages", "input"), ("max_tokens", "max_output_tokens"),
            ("response_format.json_schema.schema", "text.format.schema"),
            ("response_format.json_schema.strict", "text.format.strict"),
            ("response_format", "text.format"), ("reasoning_effort", "reasoning.effort"))


def field(chat_field: str) -> str:
  """The Responses name of a chat body field in an error."""
  for old, new in _RENAMES:
    if chat_field == old or chat_field.startswith(old + "[") or chat_field.startswith(old + "."):
      return new + chat_field[len(old):]
  return chat_field


def _text(content, where: str) -> str:
  if isinstance(content, str):
    return content
  if isinstance(content, list):
    parts = []
    for j, part in enumerate(content):
      if not isinstance(part, Mapping) or part.get("type") not in (
          "input_text", "output_text", "text"):
        raise RequestError(f"{where}.content[{j}]", "only text parts (input_text, "
                           "output_text) are supported")
      parts.append(str(part.get("text", "")))
    return "".join(parts)
  raise RequestError(f"{where}.content", "expected a string or a list of text parts")


def _messages(body: Mapping) -> list[dict]:
  out: list[dict] = []
  if body.get("instructions") is not None:
    if not isinstance(body["instructions"], str):
      raise RequestError("instructions", "expected a string")
    out.append({"role": "system", "content": body["instructions"]})
  items = body.get("input")
  if isinstance(items, str):
    return out + [{"role": "user", "content": items}]
  if not isinstance(items, list) or not items:
    raise RequestError("input", "expected a string or a non-empty list of items")
  for i, item in enumerate(items):
    where = f"input[{i}]"
    if not isinstance(item, Mapping):
      raise RequestError(where, "expected an item object")
    kind = item.get("type", "message")
    if kind == "message":
      role = item.get("role")
      if role not in ("user", "assistant", "system", "developer"):
        raise RequestError(f"{where}.role", f"{role!r} must be user, assistant, system or "
                           f"developer")
      out.append({"role": role, "content": _text(item.get("content"), where)})
    elif kind == "function_call":
      if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
        raise RequestError(where, "a function_call needs name and call_id")
      call = {"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
      if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
        out[-1]["tool_calls"].append(call)
      else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
      output = item.get("output")
      if not isinstance(item.get("call_id"), str):
        raise RequestError(f"{where}.call_id", "is missing")
      text = output if isinstance(output, str) else _text(output, where)
      out.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
    elif kind == "reasoning":
      continue  # earlier reasoning is not fed back (as chat templates drop it)
    else:
      raise RequestError(f"{where}.type", f"{kind!r} must be message, function_call or "
                         f"function_call_output")
  return out


def _tools(tools) -> list[dict]:
  if not isinstance(tools, list):
    raise RequestError("tools", "expected a list of function tools")
  out = []
  for i, t in enumerate(tools):
    if not isinstance(t, Mapping) or t.get("type") != "function":
      raise RequestError(f"tools[{i}].type", "only function tools are supported")
    fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
    if fn.get("strict") is None:  # the Responses API's default: strict, normalized
      fn["strict"] = True
      if isinstance(fn.get("parameters"), Mapping):
        fn["parameters"] = schemas.require_all(fn["parameters"])  # closed with strict tools
    out.append({"type": "function", "function": fn})
  return out


def chat_body(body: Any) -> dict:
  """The chat-completions body of a Responses body.

  Raises:
    RequestError: a field is missing, malformed or unsupported (its Responses name).
  """
  if not isinstance(body, Mapping):
    raise RequestError("body", "expected a JSON object")
  if body.get("previous_response_id") is not None:
    raise RequestError("previous_response_id", "this server stores no responses: send the "
                       "whole conversation in input (earlier output items included)")
  if body.get("background"):
    raise RequestError("background", "background responses are not supported")
  known = set(_SAME) | set(_IGNORED) | {"input", "instructions", "text", "tools",
                                        "tool_choice", "max_output_tokens", "reasoning",
                                        "previous_response_id"}
  extra = sorted(set(body) - known)
  if extra:
    raise RequestError(extra[0], "unsupported parameter (it would change the output, and "
                       "this server does not implement it)")
  out = {k: body[k] for k in _SAME if k in body}
  out["messages"] = _messages(body)
  if body.get("max_output_tokens") is not None:
    out["max_tokens"] = body["max_output_tokens"]
  if isinstance(body.get("reasoning"), Mapping) and body["reasoning"].get("effort"):
    out["reasoning_effort"] = body["reasoning"]["effort"]
  if body.get("top_logprobs"):
    out["logprobs"] = True
  fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) else None
  if fmt is not None:
    if not isinstance(fmt, Mapping):
      raise RequestError("text.format", "expected an object with a 'type'")
    if fmt.get("type") == "json_schema":
      out["response_format"] = {"type": "json_schema", "json_schema": {
          k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    else:
      out["response_format"] = dict(fmt)
  if body.get("tools") is not None:
    out["tools"] = _tools(body["tools"])
  choice = body.get("tool_choice")
  if isinstance(choice, Mapping) and choice.get("type") == "function":
    choice = {"type": "function", "function": {"name": choice.get("name")}}
  if choice is not None:
    out["tool_choice"] = choice
  return out


def new_id() -> str:
  return f"resp_{next(_IDS):08d}{int(time.time() * 1000) % 10**8:08d}"


def _usage(completion, usage_extra: dict) -> dict:
  n = len(completion.token_ids)
  return {"input_tokens": completion.prompt_tokens, "output_tokens": n,
          "total_tokens": completion.prompt_tokens + n,
          "input_tokens_details": {"cached_tokens": 0},
          "output_tokens_details": {"reasoning_tokens": 0}, **usage_extra}


def _base(rid: str, model: str, body: Mapping, chat: Mapping, status: str) -> dict:
  return {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
          "status": status, "error": None, "incomplete_details": None,
          "instructions": body.get("instructions"),
          "max_output_tokens": body.get("max_output_tokens"),
          "metadata": body.get("metadata") or {}, "output": [],
          "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
          "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
          "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
          "text": body.get("text") or {"format": {"type": "text"}}, "truncation": "disabled",
          "store": False, "usage": None, "reasoning": None}


_CUT = ("length", "timeout")  # finish reasons of an incomplete response


def message_item(rid: str, text: str, finish: str = "stop") -> dict:
  """The assistant message item; `incomplete` when the output was cut (as the response)."""
  status = "incomplete" if finish in _CUT else "completed"
  return {"type": "message", "id": f"msg_{rid}", "status": status, "role": "assistant",
          "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def call_item(rid: str, i: int, name: str, arguments: str) -> dict:
  return {"type": "function_call", "id": f"fc_{rid}_{i}", "call_id": f"call_{rid}_{i}",
          "name": name, "arguments": arguments, "status": "completed"}


def response(rid: str, model: str, body: Mapping, completion, finish: str,
             usage_extra: dict) -> dict:
  """The response object of a finished completion."""
  out = _base(rid, model, body, {}, "completed")
  items = []
  if completion.content or not completion.tool_calls:
    items.append(message_item(rid, completion.content, finish))
  items += [call_item(rid, i, c["name"], c["arguments"])
            for i, c in enumerate(completion.tool_calls)]
  out["output"] = items
  if finish in _CUT:
    out["status"] = "incomplete"
    out["incomplete_details"] = {"reason": "max_output_tokens"}
  out["usage"] = _usage(completion, usage_extra)
  return out


class Events:
  """The streamed Responses events of one response (each numbered in order)."""

  def __init__(self, rid: str, model: str, body: Mapping):
    self.rid, self.model, self.body = rid, model, body
    self.seq = 0
    self.text: list[str] = []
    self.message_open = False
    self.calls: dict[int, dict] = {}  # index -> item being streamed
    self.index = 0  # next output index

  def _event(self, kind: str, **data) -> str:
    data = {"type": kind, "sequence_number": self.seq, **data}
    self.seq += 1
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

  def start(self) -> list[str]:
    base = _base(self.rid, self.model, self.body, {}, "in_progress")
    return [self._event("response.created", response=base),
            self._event("response.in_progress", response=base)]

  def _open_message(self) -> list[str]:
    if self.message_open:
      return []
    self.message_open = True
    self.message_index = self.index
    self.index += 1
    item = dict(message_item(self.rid, ""), status="in_progress", content=[])
    return [self._event("response.output_item.added", output_index=self.message_index,
                        item=item),
            self._event("response.content_part.added", item_id=f"msg_{self.rid}",
                        output_index=self.message_index, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": [],
                              "logprobs": []})]

  def delta(self, d) -> list[str]:
    """The events of one `run.Delta`."""
    if d.kind == "content":
      out = self._open_message()
      self.text.append(d.text)
      return out + [self._event("response.output_text.delta", item_id=f"msg_{self.rid}",
                                output_index=self.message_index, content_index=0,
                                delta=d.text, logprobs=[])]
    if d.kind == "call_start":
      item = dict(call_item(self.rid, d.index, d.text, ""), status="in_progress")
      item["output_index"] = self.index
      self.index += 1
      self.calls[d.index] = item
      return [self._event("response.output_item.added", output_index=item["output_index"],
                          item={k: v for k, v in item.items() if k != "output_index"})]
    if d.kind == "call_delta":
      item = self.calls[d.index]
      item["arguments"] += d.text
      return [self._event("response.function_call_arguments.delta", item_id=item["id"],
                          output_index=item["output_index"], delta=d.text)]
    return []  # reasoning is not streamed as Responses items

  def finish(self, completion, finish: str, usage_extra: dict) -> list[str]:
    out = []
    if self.message_open:
      text = "".join(self.text)
      out += [self._event("response.output_text.done", item_id=f"msg_{self.rid}",
                          output_index=self.message_index, content_index=0, text=text,
                          logprobs=[]),
              self._event("response.content_part.done", item_id=f"msg_{self.rid}",
                          output_index=self.message_index, content_index=0,
                          part={"type": "output_text", "text": text, "annotations": [],
                                "logprobs": []}),
              self._event("response.output_item.done", output_index=self.message_index,
                          item=message_item(self.rid, text, finish))]
    for i, item in sorted(self.calls.items()):
      done = call_item(self.rid, i, item["name"], item["arguments"])
      out += [self._event("response.function_call_arguments.done", item_id=item["id"],
                          output_index=item["output_index"], arguments=item["arguments"],
                          name=item["name"]),
              self._event("response.output_item.done", output_index=item["output_index"],
                          item=done)]
    final = response(self.rid, self.model, self.body, completion, finish, usage_extra)
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    return out + [self._event(kind, response=final)]

  def failed(self, message: str, code: str | None) -> list[str]:
    base = _base(self.rid, self.model, self.body, {}, "failed")
    base["error"] = {"code": code or "server_error", "message": message}
    return [self._event("response.failed", response=base)]
