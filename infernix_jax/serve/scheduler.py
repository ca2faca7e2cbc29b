"""One engine thread shared by every connection: requests join and leave lanes between rounds.

The engine is not thread-safe, so it lives on one thread that owns it; connections talk to
it through a command queue (submit, cancel) and hear back through callbacks run on that
thread (each token event, then the result). A request that fails, or whose client goes
away, ends alone; the other lanes keep decoding.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import traceback
from typing import Any, Callable

from absl import logging


@dataclasses.dataclass
class _Pending:
  prepared: Any  # api.PreparedRequest
  on_event: Callable[[Any], None]  # runtime.TokenEvent, on the engine thread
  on_done: Callable[[Any], None]  # runtime.GenerationResult, on the engine thread


class Scheduler:
  """Runs `engine.step()` while work exists; admits and cancels between steps.

  Args:
    engine: a `runtime.Engine` (the scheduler's thread becomes its only user).
    idle_wait: seconds the thread sleeps on an empty queue before checking again.
  """

  def __init__(self, engine, idle_wait: float = 0.05):
    self.engine = engine
    self.idle_wait = idle_wait
    self._commands: queue.Queue = queue.Queue()
    self._pending: dict[str, _Pending] = {}
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._loop, name="infernix-engine", daemon=True)
    self.rounds = 0
    self.failure: str | None = None  # set when the engine itself failed (every request ends)

  def start(self) -> "Scheduler":
    self._thread.start()
    return self

  def stop(self, timeout: float = 10.0) -> None:
    """Stops the thread after its current step (pending requests end as cancelled)."""
    self._stop.set()
    self._commands.put(None)
    self._thread.join(timeout)

  @property
  def load(self) -> int:
    """Requests submitted and not yet finished."""
    return len(self._pending) + self._commands.qsize()

  def submit(self, prepared, on_event: Callable, on_done: Callable) -> None:
    """Queues a prepared request (thread-safe); callbacks run on the engine thread.

    `prepared.request.on_token` is replaced by `on_event`; `on_done` receives the
    `GenerationResult` (finish reason ERROR with its message when the engine refused it).
    """
    prepared.request.on_token = on_event
    self._commands.put(("submit", _Pending(prepared, on_event, on_done)))

  def cancel(self, request_id: str) -> None:
    """Cancels a request (thread-safe; a finished or unknown id is ignored)."""
    self._commands.put(("cancel", request_id))

  # --- the engine thread ---------------------------------------------------------------------
  def _loop(self) -> None:
    while not self._stop.is_set():
      self._drain(block=not self.engine.busy)
      if self._stop.is_set():
        break
      if not self.engine.busy:
        continue
      try:
        self.engine.step()
        self.rounds += 1
      except Exception as e:  # noqa: BLE001 (the engine failed as a whole: end every request)
        self.failure = f"{type(e).__name__}: {e}"
        logging.error("engine step failed: %s", traceback.format_exc())
        self._fail_all(self.failure)
        return
      self._collect()
    self._fail_all("the server is shutting down", cancelled=True)

  def _drain(self, block: bool) -> None:
    try:
      item = self._commands.get(timeout=self.idle_wait) if block else self._commands.get_nowait()
    except queue.Empty:
      return
    while item is not None:
      kind, payload = item
      if kind == "submit":
        self._admit(payload)
      elif kind == "cancel":
        if payload in self._pending:
          self.engine.cancel(payload)
      try:
        item = self._commands.get_nowait()
      except queue.Empty:
        item = None
    self._collect()

  def _admit(self, pending: _Pending) -> None:
    request = pending.prepared.request
    try:
      self.engine.submit(request)
    except Exception as e:  # noqa: BLE001 (a refused request ends alone)
      from infernix_jax.runtime.types import FinishReason, GenerationResult
      pending.on_done(GenerationResult(request.request_id, [], "", FinishReason.ERROR,
                                       error=f"{type(e).__name__}: {e}",
                                       error_kind="rejected"))
      return
    self._pending[request.request_id] = pending

  def _collect(self) -> None:
    for rid in list(self._pending):
      result = self.engine.result(rid)
      if result is not None:
        pending = self._pending.pop(rid)
        self._call(pending.on_done, result)

  def _fail_all(self, message: str, cancelled: bool = False) -> None:
    from infernix_jax.runtime.types import FinishReason, GenerationResult
    reason = FinishReason.CANCELLED if cancelled else FinishReason.ERROR
    while True:
      try:
        item = self._commands.get_nowait()
      except queue.Empty:
        break
      if item is not None and item[0] == "submit":
        self._pending[item[1].prepared.request.request_id] = item[1]
    for rid, pending in list(self._pending.items()):
      self._call(pending.on_done, GenerationResult(rid, [], "", reason, error=message,
                                                   error_kind="engine"))
    self._pending.clear()

  @staticmethod
  def _call(fn, arg) -> None:
    try:
      fn(arg)
    except Exception:  # noqa: BLE001 (a connection's callback never stops the engine)
      logging.error("result callback failed: %s", traceback.format_exc())

