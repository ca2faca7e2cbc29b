"""The OpenAI-compatible HTTP app (starlette): chat and text completions, responses, models.

Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses (the Responses
API, `responses.py`), GET /v1/models, GET /v1/models/{id}, GET /health (200 once the model
is loaded and warm, 503 before) and GET /metrics (Prometheus). Bad requests get a 4xx with
OpenAI's error shape `{"error": {"message", "type", "param", "code"}}`; the server keeps
serving. Every request decodes on the one shared engine (`Scheduler`); a client that
disconnects cancels its own request only. Limits (`ops.Limits`): a wrong or missing API key
401, a body over the size limit 413, more waiting requests than `max_queued` 429 with
Retry-After, a request past `request_seconds` cancelled (504, or an error event when
streamed). A body with `"trace": true` gets the generation trace as the response's top-level
`trace` field (streamed: on the chunk that carries the finish reason).
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
from infernix_jax.serve import logprobs as lp
from infernix_jax.serve import ops
from infernix_jax.serve import requests as rq
from infernix_jax.serve import responses as rs
from infernix_jax.serve import run as rn
from infernix_jax.serve import schemas

_IDS = itertools.count()


class ServerState:
  """What the routes share: the LLM and its scheduler once loaded (None while loading).

  Attributes:
    llm: the `api.LLM` (None until loaded and warm).
    scheduler: the running `Scheduler` (None until loaded).
    model_id: the name clients pass as "model".
    error: why loading failed (the server then answers 503 with it).
    defaults: what a request may leave out (`requests.Defaults`; `thinking` is filled from
      the model's chat template at `ready`).
    limits: the bounds and API key (`ops.Limits`).
    active: requests admitted and not finished (the queue bound counts them).
  """

  def __init__(self, model_id: str, *, defaults: rq.Defaults = rq.Defaults(),
               limits: ops.Limits = ops.Limits()):
    self.llm = None
    self.scheduler = None
    self.model_id = model_id
    self.error: str | None = None
    self.created = int(time.time())
    self.defaults, self.limits = defaults, limits
    self.active = 0
    self.metrics: ops.Metrics | None = None

  def ready(self, llm, scheduler) -> None:
    import dataclasses
    template = getattr(llm.tokenizer, "chat_template", None) or ""
    self.defaults = dataclasses.replace(self.defaults, thinking="enable_thinking" in template)
    self.llm, self.scheduler = llm, scheduler

  @property
  def lanes(self) -> int:
    return self.llm.engine.b if self.llm is not None else 0

  def queued(self) -> int:
    """Requests admitted that wait for a lane."""
    return max(self.active - self.lanes, 0)

  def admit(self, n: int) -> bool:
    """Takes n places, unless that would queue more than `limits.max_queued`."""
    bound = self.limits.max_queued
    if bound is not None and self.active + n > self.lanes + bound:
      return False
    self.active += n
    return True


def error_response(status: int, message: str, *, param: str | None = None,
                   kind: str = "invalid_request_error", code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
  """OpenAI's error body."""
  return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                 "code": code}}, status_code=status, headers=headers)


def _usage(state: ServerState, completion, dropped=()) -> dict:
  n = len(completion.token_ids)
  s = completion.stats
  llm = state.llm
  constraint = s["constraint"]
  if dropped:
    constraint = dict(constraint or {}, dropped=[{"pointer": p, "keyword": k}
                                                 for p, k in dropped])
  return {"prompt_tokens": completion.prompt_tokens, "completion_tokens": n,
          "total_tokens": completion.prompt_tokens + n,
          "speculative": {"drafter": llm.drafter_name, "k": llm.drafter.k,
                          "tree": bool(llm.drafter.tree),
                          "rounds": s["rounds"], "drafted": s["drafted"],
                          "accepted": s["accepted"], "accepted_length": s["accepted_length"],
                          "acceptance_rate": s["acceptance_rate"]},
          "constraint": constraint, "wall_seconds": s["wall_seconds"]}


def _sum_usage(usages: list[dict]) -> dict:
  out = dict(usages[0])
  for key in ("completion_tokens", "total_tokens"):
    out[key] = sum(u[key] for u in usages)
  out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
  return out


def _tool_calls(rid: str, calls) -> list[dict]:
  return [{"id": f"call_{rid}_{i}", "type": "function",
           "function": {"name": c["name"], "arguments": c["arguments"]}}
          for i, c in enumerate(calls)]


async def _json_body(request: Request) -> Any:
  raw = await request.body()
  try:
    return json.loads(raw)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RequestError("body", f"malformed JSON: {getattr(e, 'msg', e)}") from None


def _choice(rid: str, index: int, chat: bool, completion, finish: str, top: int | None,
            piece):
  logprobs = None
  if top is not None and completion.logprobs is not None:
    logprobs = (lp.chat if chat else lp.text)(completion.logprobs, top, piece)
  if not chat:
    return {"index": index, "text": completion.text, "finish_reason": finish,
            "logprobs": logprobs}
  message: dict = {"role": "assistant", "content": completion.content}
  if completion.tool_calls:
    message["tool_calls"] = _tool_calls(rid, completion.tool_calls)
    message["content"] = completion.content or None
  if completion.reasoning:
    message["reasoning_content"] = completion.reasoning
  return {"index": index, "message": message, "finish_reason": finish, "logprobs": logprobs}


def create_app(state: ServerState):
  """The ASGI app serving `state` (routes read it at request time), behind `ops.guard`."""
  state.metrics = metrics = ops.Metrics(state)

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

  def model_card() -> dict:
    return {"id": state.model_id, "object": "model", "created": state.created,
            "owned_by": "infernix_jax"}

  async def models(_: Request) -> Response:
    return JSONResponse({"object": "list", "data": [model_card()]})

  async def model(request: Request) -> Response:
    name = request.path_params["model"]
    if name != state.model_id:
      return error_response(404, f"the model {name!r} does not exist; this server serves "
                            f"{state.model_id!r}", param="model", code="model_not_found")
    return JSONResponse(model_card())

  async def metrics_route(_: Request) -> Response:
    body, kind = metrics.exposition()
    return Response(body, media_type=kind)

  def done(route: str, rid: str, status: int, t0: float, completion=None, kind=None):
    metrics.requests.labels(route, str(status)).inc()
    metrics.latency.labels(route).observe(time.monotonic() - t0)
    if kind is not None:
      metrics.error(kind)
    if completion is not None:
      metrics.finished(route, completion)
    ops.access_line(rid, route, status, time.monotonic() - t0, completion)

  async def generate(request: Request, kind: str) -> Response:
    """One chat / text / responses request, from the body to the reply."""
    t0 = time.monotonic()
    route = request.url.path
    bad = not_ready()
    if bad is not None:
      done(route, "", bad.status_code, t0, kind="not_ready")
      return bad
    llm = state.llm
    chat = kind != "text"
    rename = rs.field if kind == "responses" else (lambda f: f)
    body = None
    try:
      body = await _json_body(request)
      parse_body = rs.chat_body(body) if kind == "responses" else body
      parse = rq.parse_text if kind == "text" else rq.parse_chat
      parsed = parse(parse_body, drafter=llm.drafter_name, k=llm.drafter.k,
                     defaults=state.defaults)
      name = body.get("model")
      if name is not None and name != state.model_id:
        done(route, "", 404, t0, kind="model_not_found")
        return error_response(404, f"the model {name!r} does not exist; this server "
                              f"serves {state.model_id!r}", param="model",
                              code="model_not_found")
    except RequestError as e:
      done(route, "", 400, t0, kind="invalid_request")
      return error_response(400, e.message, param=rename(e.param))
    rid = (rs.new_id() if kind == "responses"
           else f"{'chatcmpl' if chat else 'cmpl'}-{next(_IDS)}")
    if not state.admit(parsed.n):
      done(route, rid, 429, t0, kind="queue_full")
      return error_response(
          429, f"the server's queue is full ({state.limits.max_queued} waiting requests, "
          f"--max-queued); retry after {state.limits.retry_after} s", kind="rate_limit_error",
          code="queue_full", headers={"Retry-After": str(state.limits.retry_after)})
    held = [parsed.n]

    def release():
      state.active -= held[0]
      held[0] = 0

    try:
      deadline = (None if state.limits.request_seconds is None
                  else t0 + state.limits.request_seconds)
      seed = parsed.options.pop("seed", 0)
      prepared, dropped = [], ()
      for i in range(parsed.n):
        p, dropped = await run_in_threadpool(
            schemas.prepare, llm, parsed, seed=seed + i,
            request_id=rid if parsed.n == 1 else f"{rid}-{i}")
        prepared.append(p)
    except RequestError as e:  # found against the model
      release()
      done(route, rid, 400, t0, kind="invalid_request")
      return error_response(400, e.message, param=rename(e.param))
    except BaseException:
      release()
      raise
    runs = [rn.Run(state, p, max_tool_calls=parsed.max_tool_calls, deadline=deadline)
            for p in prepared]
    for r in runs:
      r.start()
    if parsed.stream:
      stream = (_responses_stream(state, runs[0], rid, chat, parsed, dropped, body)
                if kind == "responses" else _stream(state, runs, rid, chat, parsed, dropped, body))

      async def tracked():
        status = 200
        try:
          async for part in stream:
            yield part
        except BaseException:
          status = 499
          raise
        finally:
          release()
          done(route, rid, status, t0, getattr(runs[0], "completion", None))

      return StreamingResponse(tracked(), media_type="text/event-stream",
                               headers={"Cache-Control": "no-cache"})
    try:
      results = await asyncio.gather(*(rn.complete(request, r, chat=chat) for r in runs))
    finally:
      release()
    if any(c is None for c in results):  # the client went away
      for r in runs:
        r.cancel()
      done(route, rid, 499, t0)
      return Response(status_code=499)
    for r, c in zip(runs, results):
      if r.timed_out and not r.capped:
        done(route, rid, 504, t0, c, kind="timeout")
        return error_response(504, f"the request ran past the server's limit of "
                              f"{state.limits.request_seconds} s (--request-timeout)",
                              kind="server_error", code="timeout")
      if c.finish_reason in ("error", "cancelled"):
        done(route, rid, 500, t0, c, kind=c.result.error_kind or "engine")
        return error_response(500, f"generation failed: {c.error}", kind="server_error",
                              code=c.result.error_kind)
    for c in results:
      done(route, rid, 200, t0, c) if c is results[-1] else metrics.finished(route, c)
    usages = [_usage(state, c, dropped) for c in results]
    if kind == "responses":
      return JSONResponse(rs.response(rid, state.model_id, body, results[0],
                                      runs[0].finish_reason(results[0]),
                                      _extra_usage(usages[0])))
    out = {"id": rid, "object": "chat.completion" if chat else "text_completion",
           "created": int(time.time()), "model": state.model_id,
           "choices": [_choice(rid, i, chat, c, r.finish_reason(c), parsed.logprobs,
                               lp.piece_of(llm.vocab))
                       for i, (r, c) in enumerate(zip(runs, results))],
           "usage": _sum_usage(usages)}
    if parsed.trace and results[0].trace is not None:
      out["trace"] = results[0].trace
    return JSONResponse(out)

  async def chat_route(request: Request) -> Response:
    return await generate(request, "chat")

  async def text_route(request: Request) -> Response:
    return await generate(request, "text")

  async def responses_route(request: Request) -> Response:
    return await generate(request, "responses")

  async def http_error(_: Request, exc: HTTPException) -> Response:
    return error_response(exc.status_code, exc.detail or "error",
                          code="not_found" if exc.status_code == 404 else None)

  app = Starlette(routes=[
      Route("/health", health),
      Route("/metrics", metrics_route),
      Route("/v1/models", models),
      Route("/v1/models/{model:path}", model),
      Route("/v1/chat/completions", chat_route, methods=["POST"]),
      Route("/v1/completions", text_route, methods=["POST"]),
      Route("/v1/responses", responses_route, methods=["POST"]),
  ], exception_handlers={HTTPException: http_error})
  return ops.guard(app, state.limits, metrics)


def _extra_usage(usage: dict) -> dict:
  return {k: v for k, v in usage.items()
          if k not in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _sse(data: dict | str) -> str:
  return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def _timeout_message(state) -> str:
  return (f"the request ran past the server's limit of {state.limits.request_seconds} s "
          f"(--request-timeout)")


async def _stream(state: ServerState, runs: list, rid: str, chat: bool, parsed, dropped,
                  body):
  """Server-sent events of a chat or text request's runs (one per choice, `n` of them,
  interleaved as they decode, each chunk naming its choice index); usage, when asked, sums
  the choices; the runs are cancelled if the client leaves."""
  del body
  created = int(time.time())
  obj = "chat.completion.chunk" if chat else "text_completion"

  def chunk(index: int, delta: dict | None = None, finish: str | None = None,
            text: str | None = None, trace: dict | None = None, logprobs: dict | None = None):
    if chat:
      choice = {"index": index, "delta": delta or {}, "finish_reason": finish,
                "logprobs": logprobs}
    else:
      choice = {"index": index, "text": text or "", "finish_reason": finish,
                "logprobs": logprobs}
    out = {"id": rid, "object": obj, "created": created, "model": state.model_id,
           "choices": [choice]}
    if trace is not None:
      out["trace"] = trace
    return _sse(out)

  merged: asyncio.Queue = asyncio.Queue()

  async def pump(i: int, run: rn.Run) -> None:
    try:
      async for item in rn.decoded(run, chat=chat):
        await merged.put((i, item))
    finally:
      await merged.put((i, None))

  if chat:
    for i in range(len(runs)):
      yield chunk(i, {"role": "assistant", "content": ""})
  pumps = [asyncio.create_task(pump(i, run)) for i, run in enumerate(runs)]
  completions, running = {}, len(runs)
  try:
    while running:
      i, item = await merged.get()
      run = runs[i]
      if item is None:
        running -= 1
        continue
      if isinstance(item, rn.Delta):
        if item.kind == "content":
          yield chunk(i, {"content": item.text}) if chat else chunk(i, text=item.text)
        elif item.kind == "reasoning":
          yield chunk(i, {"reasoning_content": item.text})
        elif item.kind == "call_start":
          yield chunk(i, {"tool_calls": [{"index": item.index,
                                          "id": f"call_{rid}_{i}_{item.index}",
                                          "type": "function",
                                          "function": {"name": item.text, "arguments": ""}}]})
        elif item.kind == "call_delta":
          yield chunk(i, {"tool_calls": [{"index": item.index,
                                          "function": {"arguments": item.text}}]})
        continue
      completion = run.completion = item
      if run.timed_out and not run.capped:
        yield _sse({"error": {"message": _timeout_message(state), "type": "server_error",
                              "param": None, "code": "timeout"}})
        break
      if completion.finish_reason in ("error", "cancelled"):
        yield _sse({"error": {"message": f"generation failed: {completion.error}",
                              "type": "server_error", "param": None,
                              "code": completion.result.error_kind}})
        break
      logprobs = None
      if parsed.logprobs is not None and completion.logprobs is not None:
        logprobs = (lp.chat if chat else lp.text)(completion.logprobs, parsed.logprobs,
                                                  lp.piece_of(state.llm.vocab))
      trace = completion.trace if parsed.trace and i == 0 else None
      yield chunk(i, finish=run.finish_reason(completion), trace=trace, logprobs=logprobs)
      completions[i] = completion
    else:
      if parsed.include_usage:
        usage = _sum_usage([_usage(state, completions[i], dropped) for i in sorted(completions)])
        yield _sse({"id": rid, "object": obj, "created": created, "model": state.model_id,
                    "choices": [], "usage": usage})
  finally:
    for task in pumps:
      task.cancel()
    for run in runs:
      run.cancel()  # a no-op once done; otherwise the client left or another choice failed
  yield _sse("[DONE]")


async def _responses_stream(state: ServerState, run: rn.Run, rid: str, chat: bool, parsed,
                            dropped, body):
  """The Responses API's streamed events of one run."""
  del chat
  events = rs.Events(rid, state.model_id, body)
  for line in events.start():
    yield line
  async for item in rn.decoded(run, chat=True):
    if isinstance(item, rn.Delta):
      for line in events.delta(item):
        yield line
      continue
    completion = run.completion = item
    if run.timed_out and not run.capped:
      for line in events.failed(_timeout_message(state), "timeout"):
        yield line
    elif completion.finish_reason in ("error", "cancelled"):
      for line in events.failed(f"generation failed: {completion.error}",
                                completion.result.error_kind):
        yield line
    else:
      usage = _extra_usage(_usage(state, completion, dropped))
      for line in events.finish(completion, run.finish_reason(completion), usage):
        yield line
