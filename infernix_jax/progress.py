"""A one-line progress bar for long loops (training, corpus generation, studies).

  bar = Progress(total=1000, label="train")
  for step in ...:
    bar.update(step + 1, loss=0.31)   # "train  42% 420/1000 loss=0.31 2.1 it/s ETA 4m37s"
  bar.close()

`bar.advance(**metrics)` counts one more item; `bar.write(text)` prints a line (a table row,
a warning) without garbling the bar. On a terminal it redraws one line; otherwise (logs, CI)
it prints a full line at most every `every_s` seconds, so captured output stays short.
"""

from __future__ import annotations

import sys
import time


def format_seconds(s: float) -> str:
  s = max(int(s), 0)
  h, rem = divmod(s, 3600)
  m, sec = divmod(rem, 60)
  return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


class Progress:
  """Progress over `total` items, with an ETA from the rate since `start` (or the first
  update after it, so compile time is not extrapolated)."""

  def __init__(self, total: int, label: str = "", *, stream=None, every_s: float = 10.0,
               start: int = 0):
    self.total, self.label = max(int(total), 1), label
    self.stream = stream or sys.stderr
    self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
    self.every_s = every_s
    self._t0, self._n0 = None, start
    self._last = None  # when the last log line was printed; None: never, so the first prints
    self.done = start
    self.line = ""

  def update(self, done: int, force: bool = False, **metrics) -> None:
    now = time.perf_counter()
    self.done = done
    if self._t0 is None:
      self._t0, self._n0 = now, done
    rate = (done - self._n0) / (now - self._t0) if now > self._t0 and done > self._n0 else 0.0
    eta = format_seconds((self.total - done) / rate) if rate > 0 else "?"
    shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in metrics.items())
    self.line = (f"{self.label} {100 * done / self.total:3.0f}% {done}/{self.total} {shown} "
                 f"{rate:.3g} it/s ETA {eta}")
    if self.tty:
      self.stream.write("\r" + self.line + "\033[K")
      self.stream.flush()
    elif (force or done >= self.total or self._last is None
          or now - self._last >= self.every_s):
      self.stream.write(self.line + "\n")
      self.stream.flush()
      self._last = now

  def advance(self, n: int = 1, **metrics) -> None:
    """`update` with `n` more items done."""
    self.update(self.done + n, **metrics)

  def write(self, text: str, file=None) -> None:
    """Prints `text` as its own line (to `file`, default stdout); on a terminal the bar is
    erased first and redrawn below it."""
    drawn = self.tty and self.line
    if drawn:
      self.stream.write("\r\033[K")
      self.stream.flush()
    print(text, file=file or sys.stdout, flush=True)
    if drawn:
      self.stream.write(self.line + "\033[K")
      self.stream.flush()

  def close(self) -> None:
    if self.tty:
      self.stream.write("\n")
      self.stream.flush()
