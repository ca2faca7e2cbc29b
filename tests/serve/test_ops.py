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
