"""The SIGTERM drain of `infernix-jax serve`: uvicorn's server, ending what it cuts cleanly."""

from __future__ import annotations

import threading

import uvicorn

FLUSH_SECONDS = 5.0  # after the drain bound: time for cut requests to send their ending


class DrainingServer(uvicorn.Server):
  """uvicorn's server whose SIGTERM drain ends what it cuts with a clear ending.

  On the first SIGTERM / SIGINT uvicorn stops accepting and waits for running requests.
  When `drain_seconds` have passed, the scheduler stops: every unfinished request ends as
  cancelled ("the server is shutting down"), so a stream sends its error event and `[DONE]`
  and a plain request its 500, instead of a connection cut mid-body. uvicorn's own cut
  (`timeout_graceful_shutdown`) comes `FLUSH_SECONDS` later.

  Args:
    config: the uvicorn.Config (its timeout_graceful_shutdown is set here).
    state: the `app.ServerState`.
    drain_seconds: how long running requests may finish after the signal.
  """

  def __init__(self, config: uvicorn.Config, state, drain_seconds: float):
    config.timeout_graceful_shutdown = drain_seconds + FLUSH_SECONDS
    super().__init__(config)
    self.state, self.drain_seconds = state, drain_seconds
    self._timer: threading.Timer | None = None

  def handle_exit(self, sig, frame) -> None:
    if self._timer is None:
      self._timer = threading.Timer(self.drain_seconds, self._end_unfinished)
      self._timer.daemon = True
      self._timer.start()
    super().handle_exit(sig, frame)

  def _end_unfinished(self) -> None:
    if self.state.scheduler is not None:
      self.state.scheduler.stop()
