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

flags.DEFINE_boolean("strict", True, "json_schema objects are closed (no properties beyond "
                     "those listed) unless a request says strict: false; --nostrict keeps "
                     "JSON Schema's open default unless a request says strict: true.")
flags.DEFINE_integer("max-tool-calls", None, "Complete tool calls kept per turn when a "
                     "request sets no max_tool_calls (default: no cap).")
flags.DEFINE_string("api-key", None, "Bearer key every /v1 route needs (default: the "
                    "INFERNIX_API_KEY environment variable, else open); /health and /metrics "
                    "stay open.")
flags.DEFINE_integer("max-body-bytes", 8 * 1024 * 1024, "Largest request body (413 beyond).")
flags.DEFINE_integer("max-queued", None, "Requests allowed to wait for a lane; more get 429 "
                     "with Retry-After (default: unbounded).")
flags.DEFINE_float("request-timeout", None, "Seconds a request may take before it is "
                   "cancelled (504; streams end with an error event). Default: none.")
flags.DEFINE_float("drain-seconds", 30.0, "On SIGTERM, how long running requests may finish "
                   "before the server exits.")

# The server's own flags (--lenient, generate's, is the requests' default for serve).
SERVE_FLAGS = ("host", "port", "lanes", "capacity", "served-model-name", "strict",
               "max-tool-calls", "api-key", "max-body-bytes", "max-queued", "request-timeout",
               "drain-seconds")


class ServeUsageError(ValueError):
  """An invalid serve flag."""


def _check() -> None:
  f = FLAGS
  if not 0 <= f.port < 65536:
    raise ServeUsageError(f"--port={f.port} must be in [0, 65535]")
  for name in ("max-tool-calls", "max-body-bytes"):
    if f[name].value is not None and f[name].value < 1:
      raise ServeUsageError(f"--{name}={f[name].value} must be at least 1")
  for name in ("max-queued", "request-timeout", "drain-seconds"):
    if f[name].value is not None and f[name].value < 0:
      raise ServeUsageError(f"--{name}={f[name].value} must be at least 0")
  try:
    import prometheus_client  # noqa: F401
  except ImportError:
    raise ServeUsageError("the server needs the serve extra: pip install -e '.[serve]' "
                          "(starlette, uvicorn, prometheus_client)") from None
  try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
  except ImportError:
    raise ServeUsageError("the server needs the serve extra: pip install -e '.[serve]' "
                          "(starlette, uvicorn)") from None


def server_defaults():
  """The request defaults of the serve flags (`serve.requests.Defaults`)."""
  from infernix_jax.serve.requests import Defaults
  return Defaults(strict=FLAGS.strict, lenient=FLAGS.lenient,
                  max_tool_calls=FLAGS["max-tool-calls"].value)


def server_limits():
  """The bounds and API key of the serve flags (`serve.ops.Limits`)."""
  import os

  from infernix_jax.serve.ops import Limits
  key = FLAGS["api-key"].value or os.environ.get("INFERNIX_API_KEY") or None
  return Limits(api_key=key, max_body_bytes=FLAGS["max-body-bytes"].value,
                max_queued=FLAGS["max-queued"].value,
                request_seconds=FLAGS["request-timeout"].value,
                drain_seconds=FLAGS["drain-seconds"].value)


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
  from infernix_jax.serve.drain import DrainingServer
  from infernix_jax.serve.scheduler import Scheduler

  source = FLAGS.model if FLAGS.model is not None else model_source(None)
  name = FLAGS["served-model-name"].value or str(source).rstrip("/").split("/")[-1]
  state = ServerState(name, defaults=server_defaults(), limits=server_limits())

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
  # SIGTERM: uvicorn stops accepting and lets running requests finish within the drain
  # bound; then the scheduler stops and what is left ends with an error, not a cut.
  config = uvicorn.Config(create_app(state), host=FLAGS.host, port=FLAGS.port,
                          log_level="warning")
  DrainingServer(config, state, FLAGS["drain-seconds"].value).run()
  if state.scheduler is not None:
    state.scheduler.stop()
  return 0
