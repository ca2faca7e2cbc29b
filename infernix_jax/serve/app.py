"""The OpenAI-compatible HTTP app (starlette): chat and text completions, models, health.

Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health
(200 once the model is loaded and warm, 503 before). Bad requests get a 4xx with OpenAI's
error shape `{"error": {"message", "type", "param", "code"}}`; the server keeps serving.
Every request decodes on the one shared engine (`Scheduler`); a client that disconnects
cancels its own request only. A body with `"trace": true` gets the generation trace as the
response's top-level `trace` field (streamed: on the chunk that carries the finish reason).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from infernix_jax.api import RequestError
from infernix_jax.serve import requests as rq

_IDS = itertools.count()


class ServerState:
  """What the routes share: the LLM and its scheduler once loaded (None while loading).

  Attributes:
    llm: the `api.LLM` (None until loaded and warm).
    scheduler: the running `Scheduler` (None until loaded).
    model_id: the name clients pass as "model".
    error: why loading failed (the server then answers 503 with it).
  """

  def __init__(self, model_id: str):
    self.llm = None
    self.scheduler = None
    self.model_id = model_id
    self.error: str | None = None
    self.created = int(time.time())

  def ready(self, llm, scheduler) -> None:
    self.llm, self.scheduler = llm, scheduler


def error_response(status: int, message: str, *, param: str | None = None,
                   kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
  """OpenAI's error body."""
  return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                 "code": code}}, status_code=status)


def _finish_reason(completion) -> str:
  if completion.finish_reason == "stop" and completion.tool_calls:
    return "tool_calls"
  if completion.finish_reason in ("stop", "stop_string"):
    return "stop"
  return completion.finish_reason  # length / cancelled / error


def _usage(state: ServerState, completion) -> dict:
  n = len(completion.token_ids)
  s = completion.stats
  llm = state.llm
  return {"prompt_tokens": completion.prompt_tokens, "completion_tokens": n,
          "total_tokens": completion.prompt_tokens + n,
          "speculative": {"drafter": llm.drafter_name, "k": llm.drafter.k,
                          "rounds": s["rounds"], "drafted": s["drafted"],
                          "accepted": s["accepted"], "accepted_length": s["accepted_length"],
                          "acceptance_rate": s["acceptance_rate"]},
          "constraint": s["constraint"], "wall_seconds": s["wall_seconds"]}


def _tool_calls(rid: str, calls) -> list[dict]:
  return [{"id": f"call_{rid}_{i}", "type": "function",
           "function": {"name": c["name"], "arguments": c["arguments"]}}
          for i, c in enumerate(calls)]


class _Run:
  """One request on the scheduler, seen from the event loop: events and the final result."""

  def __init__(self, state: ServerState, prepared):
    self.state, self.prepared = state, prepared
    self.loop = asyncio.get_running_loop()
    self.queue: asyncio.Queue = asyncio.Queue()
    self.done = False

  def start(self) -> None:
    put = lambda item: self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
    self.state.scheduler.submit(self.prepared, lambda ev: put(("event", ev)),
                                lambda res: put(("done", res)))

  def cancel(self) -> None:
    if not self.done:
      self.state.scheduler.cancel(self.prepared.request.request_id)


async def _json_body(request: Request) -> Any:
  raw = await request.body()
  try:
    return json.loads(raw)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RequestError("body", f"malformed JSON: {getattr(e, 'msg', e)}") from None


def create_app(state: ServerState) -> Starlette:
  """The starlette app serving `state` (routes read it at request time)."""

  def not_ready() -> JSONResponse | None:
    if state.scheduler is None or state.llm is None:
      message = (f"the model failed to load: {state.error}" if state.error
                 else "the model is loading; retry when /health answers 200")
      return error_response(503, message, kind="server_error", code="not_ready")
    if state.scheduler.failure:
      return error_response(503, f"the engine failed: {state.scheduler.failure}",
                            kind="server_error", code="engine_failed")
    return None

  async def health(_: Request) -> Response:
    if state.error:
      return JSONResponse({"status": "failed", "error": state.error}, status_code=503)
    if state.scheduler is None:
      return JSONResponse({"status": "loading"}, status_code=503)
    if state.scheduler.failure:
      return JSONResponse({"status": "failed", "error": state.scheduler.failure},
                          status_code=503)
    return JSONResponse({"status": "ok", "model": state.model_id,
                         "requests": state.scheduler.load})

  async def models(_: Request) -> Response:
    return JSONResponse({"object": "list", "data": [
        {"id": state.model_id, "object": "model", "created": state.created,
         "owned_by": "infernix_jax"}]})

  async def completions(request: Request, chat: bool) -> Response:
    bad = not_ready()
    if bad is not None:
      return bad
    llm = state.llm
    try:
      body = await _json_body(request)
      parse = rq.parse_chat if chat else rq.parse_text
      parsed = parse(body, drafter=llm.drafter_name, k=llm.drafter.k)
      model = body.get("model")
      if model is not None and model != state.model_id:
        return error_response(404, f"the model {model!r} does not exist; this server "
                              f"serves {state.model_id!r}", param="model",
                              code="model_not_found")
    except RequestError as e:
      return error_response(400, e.message, param=e.param)
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(_IDS)}"
    try:
      prepared = await run_in_threadpool(lambda: llm.prepare(
          parsed.prompt, max_drafts=parsed.max_drafts, request_id=rid, **parsed.options))
    except RequestError as e:  # found against the model: name the field the client sent
      return error_response(400, e.message, param=parsed.field(e.param))
    run = _Run(state, prepared)
    run.start()
    if parsed.stream:
      return StreamingResponse(_stream(state, run, rid, chat, parsed.include_usage),
                               media_type="text/event-stream",
                               headers={"Cache-Control": "no-cache"})
    result = await _wait(request, run)
    if result is None:  # the client went away
      return Response(status_code=499)
    completion = llm.complete(prepared, result)
    if completion.finish_reason in ("error", "cancelled"):
      return error_response(500, f"generation failed: {completion.error}",
                            kind="server_error", code=result.error_kind)
    return JSONResponse(_response(state, rid, chat, completion))

  async def chat_route(request: Request) -> Response:
    return await completions(request, chat=True)

  async def text_route(request: Request) -> Response:
    return await completions(request, chat=False)

  async def http_error(_: Request, exc: HTTPException) -> Response:
    return error_response(exc.status_code, exc.detail or "error",
                          code="not_found" if exc.status_code == 404 else None)

  return Starlette(routes=[
      Route("/health", health),
      Route("/v1/models", models),
      Route("/v1/chat/completions", chat_route, methods=["POST"]),
      Route("/v1/completions", text_route, methods=["POST"]),
  ], exception_handlers={HTTPException: http_error})


async def _wait(request: Request, run: _Run):
  """The result of a non-streamed run; None (and the run cancelled) if the client leaves."""
  while True:
    try:
      kind, payload = await asyncio.wait_for(run.queue.get(), timeout=0.5)
    except asyncio.TimeoutError:
      if await request.is_disconnected():
        run.cancel()
        return None
      continue
    if kind == "done":
      run.done = True
      return payload


def _response(state: ServerState, rid: str, chat: bool, completion) -> dict:
  created = int(time.time())
  if chat:
    message: dict = {"role": "assistant", "content": completion.content or None}
    if completion.tool_calls:
      message["tool_calls"] = _tool_calls(rid, completion.tool_calls)
    else:
      message["content"] = completion.content
    if completion.reasoning:
      message["reasoning_content"] = completion.reasoning
    choice = {"index": 0, "message": message, "finish_reason": _finish_reason(completion),
              "logprobs": None}
    obj = "chat.completion"
  else:
    choice = {"index": 0, "text": completion.text, "finish_reason": _finish_reason(completion),
              "logprobs": None}
    obj = "text_completion"
  out = {"id": rid, "object": obj, "created": created, "model": state.model_id,
         "choices": [choice], "usage": _usage(state, completion)}
  if completion.trace is not None:
    out["trace"] = completion.trace
  return out


def _sse(data: dict | str) -> str:
  return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def _stream(state: ServerState, run: _Run, rid: str, chat: bool, include_usage: bool):
  """Server-sent events of one run; the run is cancelled if the client disconnects."""
  created = int(time.time())
  obj = "chat.completion.chunk" if chat else "text_completion"
  decoder = run.prepared.decoder() if chat else None
  sent_content: list[str] = []
  sent_calls: dict[int, dict] = {}  # index -> {"name", "arguments"} streamed so far

  def chunk(delta: dict | None = None, finish: str | None = None, text: str | None = None,
            trace: dict | None = None):
    if chat:
      choice = {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
    else:
      choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
    body = {"id": rid, "object": obj, "created": created, "model": state.model_id,
            "choices": [choice]}
    if trace is not None:
      body["trace"] = trace
    return _sse(body)

  def deltas(events) -> list[str]:
    from infernix_jax.constrain import framing as fr
    out = []
    for ev in events:
      if isinstance(ev, fr.ContentDelta) and ev.text:
        sent_content.append(ev.text)
        out.append(chunk({"content": ev.text}))
      elif isinstance(ev, fr.ReasoningDelta) and ev.text:
        out.append(chunk({"reasoning_content": ev.text}))
      elif isinstance(ev, fr.ToolCallStart):
        sent_calls[ev.index] = {"name": ev.name, "arguments": ""}
        out.append(chunk({"tool_calls": [{"index": ev.index, "id": f"call_{rid}_{ev.index}",
                                          "type": "function",
                                          "function": {"name": ev.name, "arguments": ""}}]}))
      elif isinstance(ev, fr.ToolCallDelta) and ev.fragment:
        sent_calls[ev.index]["arguments"] += ev.fragment
        out.append(chunk({"tool_calls": [{"index": ev.index,
                                          "function": {"arguments": ev.fragment}}]}))
    return out

  try:
    if chat:
      yield chunk({"role": "assistant", "content": ""})
    while True:
      kind, payload = await run.queue.get()
      if kind == "event":
        if decoder is not None:
          for line in deltas(decoder.feed(list(payload.token_ids))):
            yield line
        elif payload.text:
          sent_content.append(payload.text)
          yield chunk({"content": payload.text}) if chat else chunk(text=payload.text)
        continue
      run.done = True
      if decoder is not None and payload.finish_reason.value == "stop":
        for line in deltas(decoder.feed([state.llm.vocab.eos_ids[0]])):
          yield line
      completion = state.llm.complete(run.prepared, payload)
      if completion.finish_reason in ("error", "cancelled"):
        yield _sse({"error": {"message": f"generation failed: {completion.error}",
                              "type": "server_error", "param": None,
                              "code": payload.error_kind}})
        break
      # What the events held back (a partial framing prefix, bytes at a length cut).
      streamed = "".join(sent_content)
      final = completion.content if chat else completion.text
      if final.startswith(streamed) and len(final) > len(streamed):
        rest = final[len(streamed):]
        yield chunk({"content": rest}) if chat else chunk(text=rest)
      for i, call in enumerate(completion.tool_calls):
        got = sent_calls.get(i)
        if got is None:
          yield chunk({"tool_calls": [{"index": i, "id": f"call_{rid}_{i}", "type": "function",
                                       "function": {"name": call["name"],
                                                    "arguments": call["arguments"]}}]})
        elif call["arguments"].startswith(got["arguments"]) and (
            len(call["arguments"]) > len(got["arguments"])):
          yield chunk({"tool_calls": [{"index": i, "function": {
              "arguments": call["arguments"][len(got["arguments"]):]}}]})
      yield chunk(finish=_finish_reason(completion), trace=completion.trace)
      if include_usage:
        yield _sse({"id": rid, "object": obj, "created": created, "model": state.model_id,
                    "choices": [], "usage": _usage(state, completion)})
      break
    yield _sse("[DONE]")
  finally:
    run.cancel()  # a no-op once done; otherwise the client went away mid-stream
