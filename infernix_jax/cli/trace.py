"""`infernix-jax trace view FILE [FILE2] [--out page.html]`: a trace file as one HTML page.

FILE is what `generate --trace FILE` wrote (or any JSON file holding one trace object or a
list of them: `GenerationResult.trace`); two files are drawn side by side. The page is
self-contained (`infernix_jax.trace_page`): open it in any browser, offline.
"""

from __future__ import annotations

import sys
from pathlib import Path

from absl import flags

FLAGS = flags.FLAGS

flags.DEFINE_string("out", None, "The page to write (default: the first FILE with the "
                    "suffix .html).")
flags.DEFINE_string("title", None, "The page heading (default: the drafters and constraints).")

TRACE_FLAGS = ("out", "title")
USAGE = "infernix-jax trace view FILE [FILE2] [--out page.html] [--title TEXT]"


class TraceUsageError(ValueError):
  """Wrong arguments to `trace view`."""


def view(args: list[str]) -> Path:
  """`trace view` with its positional arguments (after `trace`); returns the page written.

  Raises:
    TraceUsageError: not `view FILE [FILE2]`.
    trace_page.TraceFormatError / FileNotFoundError: a file is not a trace (named).
  """
  from infernix_jax import trace_page
  if not args or args[0] != "view" or not 2 <= len(args) <= 3:
    raise TraceUsageError(f"expected `trace view FILE [FILE2]`, got `trace "
                          f"{' '.join(args)}` (usage: {USAGE})")
  files = args[1:]
  traces = []
  for name in files:
    got = trace_page.load(name)
    traces += got if len(files) == 1 else got[:1]
  if len(traces) > 2:
    print(f"note: {files[0]} holds {len(traces)} traces; the page shows the first two side by "
          f"side", file=sys.stderr)
    traces = traces[:2]
  out = Path(FLAGS.out) if FLAGS.out else Path(files[0]).with_suffix(".html")
  trace_page.write(traces, out, title=FLAGS.title)
  print(out)
  return out
