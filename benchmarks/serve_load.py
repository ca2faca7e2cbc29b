"""Serving under load: requests/s, latency and tokens/s of the live server at 1, 4 and 16 clients.

One process: the embedded SmolLM2 (n-gram K = 4 with jump-forward, `--lanes` lanes), served by
uvicorn on 127.0.0.1 in a thread, driven over HTTP by `--clients` closed-loop clients (each
sends its next request when the last one answered). Each level runs `--requests` chat
requests (greedy, `--max-tokens` tokens, a short counting prompt whose seed varies) after one
warm request per client. Latency is per request, send to full reply; tokens/s counts
completion tokens over the level's wall time.

  .venv/bin/python benchmarks/serve_load.py [--clients 1,4,16] [--requests 32] [--write]

`--write` writes docs/results/serving.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
  sys.path.insert(0, str(ROOT))

import _timing  # noqa: E402  (the benchmarks folder is the script's path)


def _percentile(xs: list[float], q: float) -> float:
  xs = sorted(xs)
  return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def level(base: str, clients: int, requests: int, max_tokens: int) -> dict:
  """One closed-loop level: `requests` requests over `clients` concurrent clients."""
  import httpx

  def ask(http, i):
    t0 = time.perf_counter()
    r = http.post("/v1/chat/completions", json={
        "model": "smollm2", "max_tokens": max_tokens, "temperature": 0,
        "messages": [{"role": "user", "content": f"Count from {i} to {i + 20}."}]})
    r.raise_for_status()
    return time.perf_counter() - t0, r.json()["usage"]

  counter = iter(range(requests))
  lock = threading.Lock()
  out: list[tuple[float, dict]] = []

  def client(c):
    with httpx.Client(base_url=base, timeout=600) as http:
      ask(http, 1000 + c)  # warm: this client's connection
      while True:
        with lock:
          i = next(counter, None)
        if i is None:
          return
        got = ask(http, i)
        with lock:
          out.append(got)

  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
    list(pool.map(client, range(clients)))
  wall = time.perf_counter() - t0
  lat = [x for x, _ in out]
  tokens = sum(u["completion_tokens"] for _, u in out)
  accepted = statistics.mean(u["speculative"]["accepted_length"] for _, u in out)
  return {"clients": clients, "requests": len(out), "wall": wall,
          "rps": len(out) / wall, "p50": _percentile(lat, 0.5), "p99": _percentile(lat, 0.99),
          "tps": tokens / wall, "tokens": tokens, "accepted": accepted}


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--clients", default="1,4,16", help="comma-separated client counts")
  ap.add_argument("--requests", type=int, default=32, help="requests per level")
  ap.add_argument("--max-tokens", type=int, default=32)
  ap.add_argument("--lanes", type=int, default=4)
  ap.add_argument("--write", action="store_true")
  args = ap.parse_args()

  from infernix_jax.api import LLM
  from infernix_jax.runtime import build, compile_count
  from infernix_jax.serve.app import ServerState
  from infernix_jax.serve.scheduler import Scheduler
  from tests.serve._live import LiveServer

  t0 = time.perf_counter()
  spec = build.EngineSpec(drafter="ngram", drafter_options={"k": 4}, lanes=args.lanes,
                          capacity=1024)
  with compile_count.counting() as warm:
    llm = LLM.from_spec(spec, warmup=True)
  load_seconds = time.perf_counter() - t0
  state = ServerState("smollm2")
  server = LiveServer(state)
  state.ready(llm, Scheduler(llm.engine).start())
  rows = []
  try:
    for clients in (int(c) for c in args.clients.split(",")):
      with compile_count.counting() as compiles:  # the server thread's compiles count too
        row = level(server.base, clients, args.requests, args.max_tokens)
      rows.append({**row, **compiles.record()})
      print(f"{clients:>3} clients: {row['rps']:.2f} req/s, p50 {row['p50']:.2f} s, p99 "
            f"{row['p99']:.2f} s, {row['tps']:.1f} tok/s, accepted length "
            f"{row['accepted']:.2f}", flush=True)
  finally:
    state.scheduler.stop()
    server.stop()
  if args.write:
    write(rows, args, load_seconds, warm)
  return 0


def write(rows: list[dict], args, load_seconds: float, warm) -> None:
  import jax
  lines = [
      "# Serving under load",
      "",
      "The live server (`infernix_jax/serve`) on 127.0.0.1, driven over HTTP by closed-loop",
      "clients (each sends its next request when its last one answered). Embedded SmolLM2-135M",
      f"(n-gram K = 4 with jump-forward), {args.lanes} lanes (continuous batching; more requests",
      f"wait in the queue). {args.requests} greedy chat requests per level, {args.max_tokens}",
      "tokens at most each, after one warm request per client. Latency: send to full reply;",
      "tokens/s: completion tokens over the level's wall time; XLA compiles: programs",
      "compiled during the level (0: its timings exclude compilation).",
      "",
      "| clients | requests | requests/s | p50 latency (s) | p99 latency (s) | tokens/s | "
      "accepted length | XLA compiles |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(f"| {r['clients']} | {r['requests']} | {r['rps']:.2f} | {r['p50']:.2f} | "
                 f"{r['p99']:.2f} | {r['tps']:.1f} | {r['accepted']:.2f} | "
                 f"{r['xla_compiles']} |")
  lines += [
      "",
      f"Machine: {_timing.machine()}; JAX {jax.__version__} on "
      f"{jax.devices()[0].platform}; Python {platform.python_version()}; load average "
      f"{os.getloadavg()[0]:.1f} at the end (the run's own clients and server included). "
      f"Model load and warm-up: {load_seconds:.0f} s (XLA compilation: {warm.compiles} "
      f"programs, {warm.seconds:.0f} s).",
      f"Run on {datetime.date.today().isoformat()}.",
      "",
      "Command: `.venv/bin/python benchmarks/serve_load.py "
      f"--clients {args.clients} --requests {args.requests} --max-tokens {args.max_tokens} "
      f"--lanes {args.lanes} --write`",
      "",
  ]
  path = ROOT / "docs/results/serving.md"
  path.write_text("\n".join(lines))
  print(f"wrote {path}")


if __name__ == "__main__":
  sys.exit(main())
