"""The server's guard on a live uvicorn (no model needed): an over-limit body reaches a
client that writes its whole body before reading (urllib) as a 413, not as a reset."""

from __future__ import annotations

import importlib.util
import json
import urllib.error
import urllib.request

import pytest

from tests.serve._live import LiveServer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("uvicorn") is None,
                                reason="the serve extra (uvicorn) is absent")


def _socket_buffer_bytes() -> int:
  """The most a loopback connection can hold unread: the largest send plus receive buffer."""
  total = 0
  for name in ("tcp_wmem", "tcp_rmem"):
    try:
      with open(f"/proc/sys/net/ipv4/{name}") as f:
        total += int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
      total += 8 * 1024 * 1024
  return total


@pytest.fixture
def guarded():
  from infernix_jax.serve.app import ServerState
  from infernix_jax.serve.ops import Limits
  body = _socket_buffer_bytes() + 4 * 1024 * 1024
  state = ServerState("m", limits=Limits(max_body_bytes=1024, max_drain_bytes=body + 2**20))
  server = LiveServer(state)
  yield server, body
  server.stop()


def test_413_reaches_a_urllib_client_past_the_socket_buffers(guarded):
  """urllib sends `Connection: close` and writes the whole body before it reads; a body
  larger than both socket buffers would block it (and the server's early close would reset
  it) unless the server reads the body before answering. The 413 arrives with its JSON."""
  server, size = guarded
  data = b'{"model": "m", "messages": [], "pad": "' + b"x" * size + b'"}'
  request = urllib.request.Request(f"{server.base}/v1/chat/completions", data=data,
                                   headers={"Content-Type": "application/json"})
  with pytest.raises(urllib.error.HTTPError) as e:
    urllib.request.urlopen(request, timeout=120)
  assert e.value.code == 413
  error = json.loads(e.value.read())["error"]
  assert error["code"] == "body_too_large" and "--max-body-bytes" in error["message"]
  # the server goes on answering on new connections (503: no model is loaded here)
  with pytest.raises(urllib.error.HTTPError) as health:
    urllib.request.urlopen(f"{server.base}/health", timeout=30)
  assert health.value.code == 503


def test_request_timeout_flag_cancels_the_request_and_frees_its_lane():
  """`serve --request-timeout S` becomes the server's per-request bound; on the tiny target a
  request that would run for seconds is cancelled at S: 504 `timeout` when plain, an error
  event then `[DONE]` when streamed. Its lane is freed and the next request is answered."""
  import time

  from absl import flags

  pytest.importorskip("starlette.testclient")
  from starlette.testclient import TestClient

  from infernix_jax.cli import main as cli_main  # noqa: F401  (defines the serve flags)
  from infernix_jax.cli import serve as cli_serve
  from infernix_jax.serve.app import ServerState, create_app
  from infernix_jax.serve.scheduler import Scheduler
  from infernix_jax.testing import exact_oracle as h

  flags.FLAGS.unparse_flags()
  flags.FLAGS(["infernix-jax", "--request-timeout=0.5"])
  try:
    limits = cli_serve.server_limits()
  finally:
    flags.FLAGS.unparse_flags()
  assert limits.request_seconds == 0.5
  llm = h.tiny_llm(lanes=2, capacity=2048)
  llm.generate([1, 2, 1], max_tokens=8, temperature=1.0, ignore_eos=True)  # compiles first
  state = ServerState("tiny", limits=limits)
  scheduler = Scheduler(llm.engine).start()
  state.ready(llm, scheduler)
  client = TestClient(create_app(state))
  short = {"model": "tiny", "prompt": [1, 2, 1], "max_tokens": 4, "temperature": 1.0}
  long = dict(short, max_tokens=2000, ignore_eos=True)
  try:
    assert client.post("/v1/completions", json=short).status_code == 200
    t0 = time.monotonic()
    r = client.post("/v1/completions", json=long)
    assert r.status_code == 504, r.text
    error = r.json()["error"]
    assert error["code"] == "timeout" and "--request-timeout" in error["message"]
    assert time.monotonic() - t0 < 10  # cancelled at the bound, not run to 2,000 tokens
    with client.stream("POST", "/v1/completions", json=dict(long, stream=True)) as s:
      lines = [x[len("data: "):] for x in s.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "[DONE]" and json.loads(lines[-2])["error"]["code"] == "timeout"
    deadline = time.monotonic() + 10
    while (scheduler.load or state.active) and time.monotonic() < deadline:
      time.sleep(0.02)
    assert scheduler.load == 0 and state.active == 0
    assert client.post("/v1/completions", json=short).status_code == 200
  finally:
    scheduler.stop()
