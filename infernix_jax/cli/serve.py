"""`infernix-jax serve`: the OpenAI-compatible server on one shared engine.

The model flags (--model, --dtype, --layout, --weights) and drafting flags (--drafter, --k,
--drafter-opt, --plugin, ...) are the `generate` command's (`cli.generate.engine_spec` turns
them into the same EngineSpec); this module adds the server's own. Flags are checked
before the model loads; the server listens at once and /health answers 503 until the model
is loaded and warm.
"""

from __future__ import annotations

import sys
import threading
import time

from absl import flags

FLAGS = flags.FLAGS

flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
flags.DEFINE_integer("port", 8000, "TCP port.")
flags.DEFINE_integer("lanes", 4, "Requests decoded together (continuous batching; "
                     "more wait in a queue).")
flags.DEFINE_integer("capacity", 2048, "KV positions per lane (prompt + max_tokens + "
                     "K + 1 must fit; larger requests get a 400).")
flags.DEFINE_string("served-model-name", None, "The model id clients pass as 'model' "
                    "(default: the model file or directory name).")

SERVE_FLAGS = ("host", "port", "lanes", "capacity", "served-model-name")


class ServeUsageError(ValueError):
  """An invalid serve flag."""


def _check() -> None:
  f = FLAGS
  if not 0 <= f.port < 65536:
    raise ServeUsageError(f"--port={f.port} must be in [0, 65535]")
  try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
  except ImportError:
    raise ServeUsageError("the server needs the serve extra: pip install -e '.[serve]' "
                          "(starlette, uvicorn)") from None


def load_llm(spec):
  """The LLM of an EngineSpec (the command-line flags'), warmed up."""
  from infernix_jax.api import LLM
  return LLM.from_spec(spec, warmup=True)


def check() -> None:
  """Checks the serve flags and that the serve extra is installed (before anything loads).

  Raises:
    ServeUsageError: the message names the flag or the missing extra.
  """
  _check()


def serve(spec) -> int:
  """Runs the server until interrupted; returns the exit status.

  Args:
    spec: the EngineSpec of the model, drafting and engine flags (lanes and capacity from
      --lanes / --capacity).
  """
  import uvicorn

  from infernix_jax.models import model_source
  from infernix_jax.serve.app import ServerState, create_app
  from infernix_jax.serve.scheduler import Scheduler

  source = FLAGS.model if FLAGS.model is not None else model_source(None)
  name = FLAGS["served-model-name"].value or str(source).rstrip("/").split("/")[-1]
  state = ServerState(name)

  def load():
    t0 = time.perf_counter()
    sys.stderr.write("loading model and warming up ...\n")
    try:
      llm = load_llm(spec)
    except Exception as e:  # noqa: BLE001 (reported by /health and every route)
      state.error = f"{type(e).__name__}: {e}"
      sys.stderr.write(f"error: {state.error}\n")
      return
    state.ready(llm, Scheduler(llm.engine).start())
    sys.stderr.write(f"ready in {time.perf_counter() - t0:.1f} s: http://{FLAGS.host}:"
                     f"{FLAGS.port}/v1 serves {name!r} ({llm.drafter.name}, K="
                     f"{llm.drafter.k}, {FLAGS.lanes} lanes)\n")

  threading.Thread(target=load, name="infernix-load", daemon=True).start()
  uvicorn.run(create_app(state), host=FLAGS.host, port=FLAGS.port, log_level="warning")
  if state.scheduler is not None:
    state.scheduler.stop()
  return 0
