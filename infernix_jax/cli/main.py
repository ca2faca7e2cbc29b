"""`infernix-jax generate|serve|trace view`: the command line, above the runtime and the
server."""

from __future__ import annotations

import sys

from absl import app, flags

from infernix_jax.cli import generate as _generate  # defines the shared and generate flags
from infernix_jax.cli import serve as _serve  # defines the server's flags
from infernix_jax.cli import trace as _trace  # defines trace view's flags

FLAGS = flags.FLAGS
COMMANDS = ("generate", "serve", "trace")
HELP_ARGS = ("-h", "--help", "-help", "--helpshort", "-?")


def _run_serve() -> int:
  """`serve`: the generate command's model and drafting flags, then the server's own."""
  _serve.check()
  # --jump-forward, else the spec's default (on for a drafting drafter): a server's requests
  # are mostly constrained, and jump-forward drafts only apply to constrained lanes.
  spec = _generate.engine_spec(lanes=FLAGS.lanes, capacity=FLAGS.capacity,
                               jump_forward=FLAGS["jump-forward"].value)
  return _serve.serve(spec)


def main(argv) -> int:
  """absl entry point: `generate`, `serve` or `trace view FILE [FILE2]`."""
  args = argv[1:]
  if args and args[0] == "trace":
    from infernix_jax.trace_page import TraceFormatError
    try:
      _trace.view(args[1:])
    except (_trace.TraceUsageError, TraceFormatError, FileNotFoundError) as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    return 0
  if len(args) != 1 or args[0] not in COMMANDS:
    print(f"error: expected a command, generate or serve, got {' '.join(args) or 'nothing'} "
          f"(usage: infernix-jax generate|serve [--flags], or {_trace.USAGE}; --help lists "
          f"them)", file=sys.stderr)
    return 2
  from infernix_jax.constrain.errors import ConstraintError
  from infernix_jax.errors import ParameterError
  try:
    if args[0] == "serve":
      return _run_serve()
    _generate.generate()
  except ParameterError as e:  # raised below the flag layer: name the flag anyway
    print(f"error: {_generate.usage_error(e)}", file=sys.stderr)
    return 2
  except (_generate.UsageError, _serve.ServeUsageError, ConstraintError, FileNotFoundError,
          ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


def run() -> None:
  """Console-script entry (`infernix-jax`)."""
  if any(a in HELP_ARGS for a in sys.argv[1:]):
    # absl's --help lists only the main module's key flags and exits 1: print ours instead.
    from infernix_jax.cli import help as cli_help
    command = next((c for c in sys.argv[1:] if c in COMMANDS), "generate")
    print(cli_help.format_help(command=command))
    sys.exit(0)

  def entry(argv):
    from absl import logging
    logging.set_verbosity(logging.WARNING)
    sys.exit(main(argv))
  app.run(entry)
