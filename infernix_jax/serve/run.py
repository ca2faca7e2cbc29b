"""One request on the shared scheduler, seen from the event loop: decoded events, then the end.

`Run` submits a prepared request and carries its token events and result onto the event
loop; `decoded(run)` turns them into content / reasoning / tool-call deltas (the framing's
streaming decoder) and ends with the `api.Completion`, after emitting whatever the events
held back (a partial framing prefix, bytes cut at a length stop). A cap on tool calls per
turn (`max_tool_calls`) cancels the request as soon as the call past the cap starts and
keeps the complete calls; a request deadline cancels it and ends it as "timeout".
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import AsyncIterator


@dataclasses.dataclass
class Delta:
  """One decoded piece of output.

  Attributes:
    kind: "content" | "reasoning" | "call_start" (text = the tool's name) | "call_delta"
      (text = an arguments fragment).
    text: the piece.
    index: the tool call's index (calls only).
  """
  kind: str
  text: str
  index: int = 0


class Run:
  """One prepared request on `state.scheduler`.

  Args:
    state: the `app.ServerState`.
    prepared: the `api.PreparedRequest`.
    max_tool_calls: complete calls kept (the request is cancelled when the next starts).
    deadline: `time.monotonic()` after which the request is cancelled (None: none).
  """

  def __init__(self, state, prepared, *, max_tool_calls: int | None = None,
               deadline: float | None = None):
    self.state, self.prepared = state, prepared
    self.loop = asyncio.get_running_loop()
    self.queue: asyncio.Queue = asyncio.Queue()
    self.done = False
    self.max_tool_calls = max_tool_calls
    self.deadline = deadline
    self.capped = False  # cancelled at the tool-call cap: the calls before it stand
    self.timed_out = False
    self.started = time.monotonic()
    self.completion = None  # the api.Completion once finished (streams set it)

  @property
  def request_id(self) -> str:
    return self.prepared.request.request_id

  def start(self) -> None:
    put = lambda item: self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
    self.state.scheduler.submit(self.prepared, lambda ev: put(("event", ev)),
                                lambda res: put(("done", res)))

  def cancel(self) -> None:
    if not self.done:
      self.state.scheduler.cancel(self.request_id)

  async def next(self):
    """The next (kind, payload) from the engine thread; a passed deadline cancels the run."""
    while True:
      timeout = None if self.deadline is None else max(self.deadline - time.monotonic(), 0.01)
      try:
        return await asyncio.wait_for(self.queue.get(), timeout=timeout)
      except asyncio.TimeoutError:
        if not self.timed_out:
          self.timed_out = True
          self.cancel()

  def finish_reason(self, completion) -> str:
    """OpenAI's finish reason of the run's completion."""
    if self.timed_out and not self.capped:
      return "timeout"
    if self.capped or (completion.finish_reason == "stop" and completion.tool_calls):
      return "tool_calls"
    if completion.finish_reason in ("stop", "stop_string"):
      return "stop"
    return completion.finish_reason  # length / cancelled / error


async def decoded(run: Run, *, chat: bool = True) -> AsyncIterator[Delta | object]:
  """The run's decoded deltas, then its `api.Completion` (the last item).

  A completion whose calls were cut at `max_tool_calls` keeps only the complete calls before
  the cap; a cut-off call is never among them (`Completion.tool_calls` holds complete calls).
  """
  from infernix_jax.constrain import framing as fr
  llm = run.state.llm
  decoder = run.prepared.decoder() if chat else None
  sent: list[str] = []  # content text sent
  calls: dict[int, str] = {}  # index -> arguments sent

  def convert(events):
    out = []
    for ev in events:
      index = getattr(ev, "index", 0)
      if run.capped or (isinstance(ev, (fr.ToolCallStart, fr.ToolCallDelta))
                        and run.max_tool_calls is not None and index >= run.max_tool_calls):
        if not run.capped:
          run.capped = True
          run.cancel()
        continue
      if isinstance(ev, fr.ContentDelta) and ev.text:
        sent.append(ev.text)
        out.append(Delta("content", ev.text))
      elif isinstance(ev, fr.ReasoningDelta) and ev.text:
        out.append(Delta("reasoning", ev.text))
      elif isinstance(ev, fr.ToolCallStart):
        calls[index] = ""
        out.append(Delta("call_start", ev.name, index))
      elif isinstance(ev, fr.ToolCallDelta) and ev.fragment:
        calls[index] += ev.fragment
        out.append(Delta("call_delta", ev.fragment, index))
    return out

  try:
    while True:
      kind, payload = await run.next()
      if kind == "event":
        if decoder is not None:
          for d in convert(decoder.feed(list(payload.token_ids))):
            yield d
        elif payload.text:
          sent.append(payload.text)
          yield Delta("content", payload.text)
        continue
      run.done = True
      if decoder is not None and payload.finish_reason.value == "stop" and not run.capped:
        for d in convert(decoder.feed([llm.vocab.eos_ids[0]])):
          yield d
      completion = llm.complete(run.prepared, payload)
      if run.capped:
        completion.tool_calls = completion.tool_calls[:run.max_tool_calls]
        completion.finish_reason, completion.error = "stop", None
      if completion.finish_reason not in ("error", "cancelled"):
        streamed = "".join(sent)
        final = completion.content if chat else completion.text
        if final.startswith(streamed) and len(final) > len(streamed):
          yield Delta("content", final[len(streamed):])
        for i, call in enumerate(completion.tool_calls):
          got = calls.get(i)
          if got is None:
            yield Delta("call_start", call["name"], i)
            got = ""
          if call["arguments"].startswith(got) and len(call["arguments"]) > len(got):
            yield Delta("call_delta", call["arguments"][len(got):], i)
      yield completion
      return
  finally:
    run.cancel()  # a no-op once done; otherwise the client went away mid-stream


async def complete(request, run: Run, *, chat: bool = True):
  """The Completion of a non-streamed run; None (and the run cancelled) if the client leaves.

  Args:
    request: the starlette Request (polled for a disconnect).
  """
  async def consume():
    last = None
    async for item in decoded(run, chat=chat):
      last = item
    return last

  task = asyncio.ensure_future(consume())
  watcher = asyncio.ensure_future(_disconnected(request))
  done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
  if task in done:
    watcher.cancel()
    return task.result()
  run.cancel()
  task.cancel()
  return None


async def _disconnected(request) -> None:
  while not await request.is_disconnected():
    await asyncio.sleep(0.5)
