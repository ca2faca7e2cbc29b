"""`infernix-jax serve` as a subprocess on a tiny random model (byte-level vocabulary, no
SmolLM2): SIGTERM while streams run drains them, each stream ends with `[DONE]` or a clear
error event, and the process exits; nothing hangs. Loopback only, every wait bounded."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime.test_cli import tiny_tokenizer_json

pytestmark = [
    pytest.mark.slow,  # a server process: model load and warm-up in a fresh interpreter
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("uvicorn", "httpx")),
                       reason="the serve and test extras (uvicorn, httpx) are absent"),
]
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _tiny_checkpoint(folder: Path) -> Path:
  from flax import nnx

  from infernix_jax import models as im
  tiny_tokenizer_json(folder / "tokenizer.json")
  cfg = im.ModelConfig(vocab_size=264, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=64)
  return im.save_checkpoint(folder / "tiny", cfg, im.Transformer(cfg, rngs=nnx.Rngs(0)),
                            vocab_source=folder / "tokenizer.json")


class ServerProcess:
  """`python -m infernix_jax.cli serve FLAGS` on a free loopback port, ready when /health says
  200 (bounded wait); its stderr goes to a file the assertions quote."""

  def __init__(self, tmp_path: Path, *flags: str, ready_seconds: float = 600):
    import httpx
    self.port = _free_port()
    self.base = f"http://127.0.0.1:{self.port}"
    self.log = tmp_path / "server.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "infernix_jax.cli", "serve", "--host=127.0.0.1",
         f"--port={self.port}", *flags], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
        stderr=open(self.log, "w"))
    deadline = time.monotonic() + ready_seconds
    while True:
      assert self.proc.poll() is None, f"the server exited: {self.tail()}"
      assert time.monotonic() < deadline, f"not ready in {ready_seconds} s: {self.tail()}"
      try:
        if httpx.get(f"{self.base}/health", timeout=5).status_code == 200:
          return
      except httpx.HTTPError:
        pass
      time.sleep(0.5)

  def tail(self) -> str:
    return self.log.read_text()[-2000:]

  def kill(self) -> None:
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait(30)


@pytest.fixture
def tiny_model(tmp_path):
  return _tiny_checkpoint(tmp_path)


def _stream(base: str, started, i: int, max_tokens: int) -> list[str]:
  """One streamed /v1/completions; its `data:` payloads in order (a broken connection is
  returned as a last entry 'BROKEN: ...')."""
  import httpx
  body = {"model": "tiny", "prompt": f"Count {i}", "max_tokens": max_tokens, "stream": True,
          "temperature": 1.0, "seed": i, "ignore_eos": True}
  lines = []
  try:
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as response:
      assert response.status_code == 200
      for line in response.iter_lines():
        if line.startswith("data: "):
          lines.append(line[len("data: "):])
          started.set() if len(lines) == 1 else None
  except httpx.HTTPError as e:
    lines.append(f"BROKEN: {type(e).__name__}: {e}")
  return lines


@pytest.mark.parametrize("drain,max_tokens,whole", [
    (60, 48, True),     # the drain bound leaves time: every stream finishes whole
    (1, 1000, False),   # it does not: each stream ends with an error event, then [DONE]
])
def test_sigterm_to_the_server_process_drains_its_streams(tmp_path, tiny_model, drain,
                                                          max_tokens, whole):
  import threading

  import httpx
  server = ServerProcess(tmp_path, f"--model={tiny_model}", "--lanes=4", "--capacity=1024",
                         f"--drain-seconds={drain}", "--k=2")
  try:
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
      started = [threading.Event() for _ in range(3)]
      futures = [pool.submit(_stream, server.base, started[i], i, max_tokens)
                 for i in range(3)]
      for event in started:
        assert event.wait(120), f"a stream sent nothing: {server.tail()}"
      server.proc.send_signal(signal.SIGTERM)
      t0 = time.monotonic()
      streams = [f.result(timeout=drain + 120) for f in futures]
      # uvicorn re-raises the captured SIGTERM once it has shut down: killed by it, or 0
      assert server.proc.wait(drain + 60) in (0, -signal.SIGTERM), server.tail()
      assert time.monotonic() - t0 < drain + 60
    for lines in streams:
      assert lines[-1] == "[DONE]", lines[-3:]  # never a connection cut mid-body
      payloads = [json.loads(x) for x in lines[:-1]]
      if whole:
        finishes = [p["choices"][0].get("finish_reason") for p in payloads]
        assert finishes[-1] == "length" and finishes.count("length") == 1, lines[-3:]
        assert "".join(p["choices"][0]["text"] for p in payloads)
      else:
        error = payloads[-1]["error"]
        assert "shutting down" in error["message"] and error["type"] == "server_error"
        assert not any("error" in p for p in payloads[:-1])
    with pytest.raises(httpx.HTTPError):  # the port is closed: the process is gone
      httpx.get(f"{server.base}/health", timeout=5)
  finally:
    server.kill()
