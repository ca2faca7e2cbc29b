"""Operations: the access log, Prometheus metrics, API-key checks and the request limits.

`Limits` holds the server's bounds (body size, queued requests, seconds per request, the
drain on shutdown) and its API key. `guard` is the ASGI middleware that answers 401 (a wrong
or missing Bearer key on /v1/...; /health and /metrics stay open) and 413 (a body over the
limit, by its Content-Length or as it streams in, after reading and dropping the rest of
the body up to `Limits.max_drain_bytes`) before a route runs. `Metrics` keeps the
counters on its own prometheus_client registry; `access_line` writes one log line per request
to the "infernix_jax.serve.access" logger.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import sys

ACCESS = logging.getLogger("infernix_jax.serve.access")


def _setup_access_log() -> None:
  if not ACCESS.handlers:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    ACCESS.addHandler(handler)
    ACCESS.setLevel(logging.INFO)
    ACCESS.propagate = False


@dataclasses.dataclass(frozen=True)
class Limits:
  """The server's bounds and key.

  Attributes:
    api_key: the Bearer key every /v1 route needs (None: open).
    max_body_bytes: the largest request body (413 beyond).
    max_drain_bytes: how much of an over-limit body is read and discarded before the 413 is
      sent: a client that writes its whole body before reading (urllib, with `Connection:
      close`) then gets the 413, not a reset connection. Beyond it, the socket is closed.
    max_queued: requests waiting for a lane beyond the engine's lanes (429 beyond, with
      Retry-After); None: unbounded.
    request_seconds: wall seconds a request may take (cancelled then; None: unbounded).
    drain_seconds: on SIGTERM, how long running requests may finish before they are cut.
    retry_after: the Retry-After seconds of a 429.
  """
  api_key: str | None = None
  max_body_bytes: int = 8 * 1024 * 1024
  max_drain_bytes: int = 64 * 1024 * 1024
  max_queued: int | None = None
  request_seconds: float | None = None
  drain_seconds: float = 30.0
  retry_after: int = 1


def _error(status: int, message: str, kind: str, code: str, headers=()) -> tuple:
  body = json.dumps({"error": {"message": message, "type": kind, "param": None,
                               "code": code}}).encode()
  return status, body, [(b"content-type", b"application/json"), *headers]


async def _send(send, status: int, body: bytes, headers) -> None:
  await send({"type": "http.response.start", "status": status,
              "headers": [*headers, (b"content-length", str(len(body)).encode())]})
  await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
  pass


async def _discard_body(receive, limit: int) -> None:
  """Reads the rest of the request body, at most `limit` bytes, and drops it (the 413 then
  reaches a client still writing; uvicorn closes the connection after it)."""
  read = 0
  while read <= limit:
    message = await receive()
    if message["type"] != "http.request":
      return
    read += len(message.get("body", b""))
    if not message.get("more_body", False):
      return


def guard(app, limits: Limits, metrics: "Metrics | None" = None):
  """ASGI middleware: the API key (401) and the body size (413) ahead of `app`."""

  async def middleware(scope, receive, send):
    if scope["type"] != "http":
      return await app(scope, receive, send)
    path = scope.get("path", "")
    headers = dict(scope.get("headers") or ())
    if limits.api_key is not None and path.startswith("/v1"):
      got = headers.get(b"authorization", b"").decode("latin-1")
      want = f"Bearer {limits.api_key}"
      if not hmac.compare_digest(got.encode(), want.encode()):
        if metrics is not None:
          metrics.error("unauthorized")
        return await _send(send, *_error(
            401, "a missing or wrong API key: send 'Authorization: Bearer <key>' with the "
            "server's --api-key", "authentication_error", "invalid_api_key"))
    size = headers.get(b"content-length")
    too_large = _error(413, f"the request body is over {limits.max_body_bytes} bytes (the "
                       f"server's --max-body-bytes)", "invalid_request_error",
                       "body_too_large")
    if size is not None and size.isdigit() and int(size) > limits.max_body_bytes:
      if metrics is not None:
        metrics.error("body_too_large")
      await _discard_body(receive, limits.max_drain_bytes)
      return await _send(send, *too_large)
    seen = 0

    async def bounded():
      nonlocal seen
      message = await receive()
      if message["type"] == "http.request":
        seen += len(message.get("body", b""))
        if seen > limits.max_body_bytes:
          raise _TooLarge
      return message

    try:
      return await app(scope, bounded, send)
    except _TooLarge:
      if metrics is not None:
        metrics.error("body_too_large")
      await _discard_body(receive, limits.max_drain_bytes - seen)
      return await _send(send, *too_large)

  return middleware


class Metrics:
  """Prometheus metrics of one server (its own registry: /metrics exposes only these)."""

  def __init__(self, state):
    import prometheus_client as pc
    self.registry = r = pc.CollectorRegistry()
    self.requests = pc.Counter("infernix_requests", "Requests answered, by route and status",
                               ["route", "status"], registry=r)
    self.errors = pc.Counter("infernix_errors", "Refused or failed requests, by kind",
                             ["kind"], registry=r)
    self.tokens = pc.Counter("infernix_tokens", "Tokens, by kind (prompt, completion)",
                             ["kind"], registry=r)
    self.rounds = pc.Counter("infernix_rounds", "Speculative rounds of finished requests",
                             registry=r)
    self.accepted = pc.Histogram("infernix_accepted_length", "Tokens per round of a request",
                                 buckets=(1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 12), registry=r)
    self.mask = pc.Counter("infernix_mask_seconds", "Host constraint seconds (masks, "
                           "lookahead, accept)", registry=r)
    self.latency = pc.Histogram("infernix_request_seconds", "Request wall seconds",
                                ["route"], registry=r)
    queue = pc.Gauge("infernix_queue_depth", "Requests waiting for a lane", registry=r)
    queue.set_function(lambda: state.queued())
    running = pc.Gauge("infernix_running_requests", "Requests submitted and not finished",
                       registry=r)
    running.set_function(lambda: state.scheduler.load if state.scheduler else 0)
    self._pc = pc

  def error(self, kind: str) -> None:
    self.errors.labels(kind).inc()

  def finished(self, route: str, completion) -> None:
    """Counts a finished completion's tokens, rounds, accepted length and mask time."""
    s = completion.stats
    self.tokens.labels("prompt").inc(completion.prompt_tokens)
    self.tokens.labels("completion").inc(len(completion.token_ids))
    self.rounds.inc(s.get("rounds", 0))
    if s.get("rounds"):
      self.accepted.observe(s["accepted_length"])
    c = s.get("constraint") or {}
    self.mask.inc(c.get("lookahead_seconds", 0.0) + c.get("accept_seconds", 0.0))
    del route

  def exposition(self) -> tuple[bytes, str]:
    return self._pc.generate_latest(self.registry), self._pc.CONTENT_TYPE_LATEST


def access_line(rid: str, route: str, status: int, seconds: float, completion=None) -> None:
  """One access-log line: id, route, status, tokens (prompt+completion), seconds, accepted
  length."""
  _setup_access_log()
  if completion is not None:
    tokens = f"{completion.prompt_tokens}+{len(completion.token_ids)}"
    accepted = f"{completion.stats.get('accepted_length', 0):.2f}"
  else:
    tokens, accepted = "-", "-"
  ACCESS.info("%s %s %d tokens=%s seconds=%.3f accepted_length=%s", rid or "-", route,
              status, tokens, seconds, accepted)
