"""The OpenAI-compatible server: `infernix-jax serve` (needs the serve extra).

  requests.py   OpenAI bodies -> `LLM.prepare` options (errors name the field)
  scheduler.py  the engine thread: continuous batching, cancel on disconnect
  app.py        the starlette routes: chat and text completions, models, health, SSE
  drain.py      the SIGTERM drain: uvicorn's server, ending what it cuts with a clear error
  command.py    the `serve` command's flags and start-up (importing it is light)
"""
