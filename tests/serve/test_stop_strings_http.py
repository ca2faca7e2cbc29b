"""Stop strings over HTTP: /v1/completions on the tiny target with drafters whose drafts are
all accepted (a chain and a tree, K = 3), a stop string completed at each position of a
round. The streamed text, the non-streamed text, the finish reason and the usage equal the
ordinary decoding oracle's (`tests/runtime/_stop_oracle.py`), and the stream never passes
the stop."""

from __future__ import annotations

import json

import pytest

from tests.runtime._stop_oracle import MAX, expected, llm, round_cases

pytestmark = pytest.mark.slow  # a server over two LLMs on the tiny target


def _events(body: str) -> list:
  """The JSON payloads of a server-sent event stream, then "[DONE]"."""
  out = []
  for line in body.splitlines():
    if line.startswith("data: "):
      data = line[len("data: "):]
      out.append(data if data == "[DONE]" else json.loads(data))
  return out


@pytest.mark.parametrize("kind", ["oracle-chain", "oracle-tree"])
def test_completions_end_at_the_stop_streamed_or_not(kind):
  pytest.importorskip("starlette.testclient")
  from starlette.testclient import TestClient

  from infernix_jax.serve.app import ServerState, create_app
  from infernix_jax.serve.scheduler import Scheduler

  model = llm(kind)
  state = ServerState("tiny")
  scheduler = Scheduler(model.engine).start()
  state.ready(model, scheduler)
  client = TestClient(create_app(state))
  try:
    for prompt, stops in round_cases():
      want_ids, want_text, _ = expected(prompt, stops)
      body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX, "temperature": 0.0,
              "frequency_penalty": 1.0, "stop": list(stops)}
      where = (kind, prompt, stops)
      out = client.post("/v1/completions", json=body)
      assert out.status_code == 200, out.text
      choice, usage = out.json()["choices"][0], out.json()["usage"]
      assert (choice["text"], choice["finish_reason"]) == (want_text, "stop"), where
      assert usage["completion_tokens"] == len(want_ids), where
      assert usage["speculative"]["drafted"] > 0, where
      streamed = client.post("/v1/completions", json=dict(
          body, stream=True, stream_options={"include_usage": True}))
      assert streamed.status_code == 200, streamed.text
      events = _events(streamed.text)
      assert events[-1] == "[DONE]", where
      chunks = [e for e in events[:-1] if e["choices"]]
      text = "".join(c["choices"][0]["text"] for c in chunks)
      assert text == want_text, where
      assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop", where
      assert not any(c["choices"][0]["finish_reason"] for c in chunks[:-1]), where
      assert events[-2]["usage"]["completion_tokens"] == len(want_ids), where
  finally:
    scheduler.stop()
