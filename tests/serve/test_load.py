"""Load and faults on a live server with limits: 64 clients against --max-queued 16, an
oversized body, a client that leaves mid-stream, a wrong or missing API key, and SIGTERM
(uvicorn's exit handler) during streams. Bounded in count and time; loopback only.
"""

from __future__ import annotations

import concurrent.futures
import signal
import time

import pytest

from tests.serve._live import LiveServer, marks

pytestmark = marks("httpx")

KEY = "sk-test"
QUEUED = 16
AUTH = {"Authorization": f"Bearer {KEY}"}


def _body(i: int, tokens: int = 6, **extra) -> dict:
  return {"model": "smollm2", "max_tokens": tokens, "temperature": 0,
          "messages": [{"role": "user", "content": f"Count from {i} to {i + 3}."}], **extra}


@pytest.fixture(scope="module")
def served(smollm2_llm):
  from infernix_jax.serve.app import ServerState
  from infernix_jax.serve.ops import Limits
  from infernix_jax.serve.scheduler import Scheduler
  state = ServerState("smollm2", limits=Limits(api_key=KEY, max_body_bytes=64 * 1024,
                                               max_queued=QUEUED, drain_seconds=30))
  server = LiveServer(state, drain_seconds=30)
  state.ready(smollm2_llm, Scheduler(smollm2_llm.engine).start())
  yield server
  state.scheduler.stop()
  server.stop()


def _post(base, body, headers=AUTH, timeout=180):
  import httpx
  return httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=timeout)


def test_api_key(served):
  import httpx
  assert httpx.get(f"{served.base}/health", timeout=10).status_code == 200  # open
  for headers in ({}, {"Authorization": "Bearer wrong"}):
    r = _post(served.base, _body(0), headers=headers)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
  assert _post(served.base, _body(0)).status_code == 200


def test_oversized_body_gets_413_and_the_server_keeps_serving(served):
  big = _body(0, messages_pad="x")  # an unknown field would be a 400; the size comes first
  big["messages"][0]["content"] = "y" * (70 * 1024)
  r = _post(served.base, big)
  assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
  assert _post(served.base, _body(1)).status_code == 200


def test_64_clients_against_max_queued_16(served):
  """Every request completes with its solo output or gets 429 with Retry-After; none is
  lost or mixed up, and the admitted count never passes lanes + max_queued."""
  n = 64
  solo = {}
  for i in range(4):  # the prompts repeat mod 4: their solo outputs are known
    solo[i] = _post(served.base, _body(i)).json()["choices"][0]["message"]["content"]
  peak = [0]

  def one(i):
    peak[0] = max(peak[0], served.state.active)
    return _post(served.base, _body(i % 4))

  with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
    replies = list(pool.map(one, range(n), timeout=300))
  codes = [r.status_code for r in replies]
  assert set(codes) <= {200, 429}, codes
  assert codes.count(200) >= served.state.lanes and 429 in codes
  for i, r in enumerate(replies):
    if r.status_code == 200:
      assert r.json()["choices"][0]["message"]["content"] == solo[i % 4]
    else:
      assert r.headers["Retry-After"] and r.json()["error"]["code"] == "queue_full"
  assert peak[0] <= served.state.lanes + QUEUED
  assert served.state.active == 0 and served.state.scheduler.load == 0


def test_disconnect_mid_stream(served):
  import httpx
  with httpx.Client(base_url=served.base, timeout=60, headers=AUTH) as http:
    with http.stream("POST", "/v1/chat/completions",
                     json=_body(0, tokens=300, stream=True)) as response:
      assert response.status_code == 200
      for i, _ in enumerate(response.iter_lines()):
        if i >= 3:
          break
  deadline = time.monotonic() + 20
  while (served.state.scheduler.load or served.state.active) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert served.state.scheduler.load == 0 and served.state.active == 0
  assert _post(served.base, _body(2)).status_code == 200


def test_sigterm_drains_running_streams(served):
  """uvicorn's SIGTERM handler: running streams finish whole, then the server exits."""
  import httpx

  def stream(i):
    text = []
    with httpx.Client(base_url=served.base, timeout=120, headers=AUTH) as http:
      with http.stream("POST", "/v1/chat/completions",
                       json=_body(i, tokens=16, stream=True)) as response:
        for line in response.iter_lines():
          text.append(line)
    return text

  with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
    futures = [pool.submit(stream, i) for i in range(3)]
    deadline = time.monotonic() + 30
    while served.state.active < 3 and time.monotonic() < deadline:
      time.sleep(0.02)
    served.server.handle_exit(signal.SIGTERM, None)
    lines = [f.result(timeout=120) for f in futures]
  for text in lines:  # each stream ran to its finish reason and [DONE]
    assert "data: [DONE]" in text, text[-3:]
    assert any('"finish_reason": "length"' in t or '"finish_reason": "stop"' in t
               for t in text), text[-3:]
  served.thread.join(30)
  assert not served.thread.is_alive()
