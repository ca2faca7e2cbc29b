"""Benchmark: host memory of loading a sharded 1B bf16 checkpoint, the streaming loader
against reading every shard whole.

  python benchmarks/loader_memory.py [--write]

The checkpoint is Qwen3-shaped (Qwen3-8B's vocabulary and head sizes, narrower and
shallower: 1.08B parameters, 2.16 GB in bf16, untied), random, in 5 shards cut as
`save_pretrained` cuts them; it is written once under ~/.cache/infernix_jax/loader_memory/.
Each loader runs in a fresh process on the CPU, where device memory is host memory, so the
peak resident set (`ru_maxrss`) counts everything the load held:

  * ours, stacked and unrolled: `models.load_hf_dir(dtype="bfloat16")`;
  * the peer, whole shards: safetensors' own JAX reader (`safetensors.flax.load_file`) per
    shard, every matrix transposed to [in, out] on the device, the shard then dropped: the
    way a loader without streaming reads a checkpoint.

Reported per loader: load seconds, peak RSS, and memory beyond the model (peak minus the RSS
after the imports minus the model's bytes); the bound the streaming loader is designed to
(1.3 x the largest shard + one layer), and the peer's extra memory over ours. Peak RSS
depends on the allocator and the kernel's page handling, so the figures are per machine; the
live-buffer bound itself is asserted by tests/models/test_sharded_checkpoints.py.
`--write` stores docs/results/loader_memory.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _timing  # noqa: E402
from infernix_jax.testing import hf_checkpoints  # noqa: E402

BIG = hf_checkpoints.hf_config("qwen3", vocab=151_936, dim=1536, layers=20, heads=16,
                               kv_heads=8, head_dim=128, ffn=4608, tie=False)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "infernix_jax" / \
    "loader_memory" / "qwen3_1b"
REPORT = ROOT / "docs" / "results" / "loader_memory.md"

_MEASURE = """
import json, os, resource, sys, time
import jax
import numpy as np
from flax import nnx

def rss():
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

import infernix_jax.models as im
from safetensors.flax import load_file
jax.block_until_ready(jax.numpy.zeros(8) + 1)  # the backend is up
directory, loader = sys.argv[1], sys.argv[2]
base = rss()
start = time.perf_counter()
if loader == "whole_shards":
  index = json.load(open(directory + "/model.safetensors.index.json"))["weight_map"]
  arrays = {}
  for shard in sorted(set(index.values())):
    tensors = load_file(directory + "/" + shard)
    for name, value in tensors.items():
      arrays[name] = value.T if value.ndim == 2 else value
    del tensors
  leaves = list(arrays.values())
else:
  cfg, model, _ = im.load_hf_dir(directory, dtype="bfloat16", layout=loader)
  leaves = jax.tree.leaves(nnx.state(model))
jax.block_until_ready(leaves)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"base": base, "peak": peak, "seconds": seconds,
                  "model_bytes": sum(leaf.nbytes for leaf in leaves),
                  "dtypes": sorted({str(leaf.dtype) for leaf in leaves})}))
"""
LOADERS = ("stacked", "unrolled", "whole_shards")


def checkpoint() -> list[Path]:
  """The cached 1B checkpoint's shard files (written on first use, one shard at a time)."""
  done = CACHE / "complete"
  if not done.exists():
    import torch  # pylint: disable=import-outside-toplevel
    total = 2 * sum(int(np.prod(s)) for _, s in hf_checkpoints.hf_shapes(BIG))
    generator = torch.Generator().manual_seed(0)

    def make(name, shape):
      del name
      return torch.randn(shape, generator=generator, dtype=torch.bfloat16) * 0.02
    hf_checkpoints.write_sharded(CACHE, BIG, make, 2, total // 5)
    done.write_text("ok\n")
  index = json.loads((CACHE / "model.safetensors.index.json").read_text())["weight_map"]
  return [CACHE / name for name in sorted(set(index.values()))]


def measure(loader: str) -> dict:
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  run = subprocess.run([sys.executable, "-c", _MEASURE, str(CACHE), loader],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
  if run.returncode != 0:
    raise SystemExit(f"{loader}: the measuring process failed:\n{run.stderr[-3000:]}")
  return json.loads(run.stdout.splitlines()[-1])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--write", action="store_true", help=f"store {REPORT.relative_to(ROOT)}")
  args = parser.parse_args()
  files = checkpoint()
  largest = max(f.stat().st_size for f in files)
  layer = 2 * sum(int(np.prod(s)) for n, s in hf_checkpoints.hf_shapes(BIG)
                  if n.startswith("model.layers.0."))
  bound = 1.3 * largest + layer
  mib = 2 ** 20
  rows = {}
  for loader in LOADERS:
    out = measure(loader)
    out["beyond"] = out["peak"] - out["base"] - out["model_bytes"]
    rows[loader] = out
    print(f"{loader}: {out['seconds']:.1f} s, peak {out['peak'] / mib:.0f} MiB, beyond the "
          f"model {out['beyond'] / mib:.0f} MiB", flush=True)
  ours = max(rows["stacked"]["beyond"], rows["unrolled"]["beyond"])
  lines = [
      "# Host memory of loading a sharded checkpoint",
      "",
      "Written by `benchmarks/loader_memory.py --write`. A random Qwen3-shaped checkpoint of "
      f"1.08B parameters in bf16 ({sum(f.stat().st_size for f in files) / mib:.0f} MiB in "
      f"{len(files)} shards, the largest {largest / mib:.0f} MiB; one layer "
      f"{layer / mib:.0f} MiB), loaded as bf16 in a fresh process on the CPU, where device "
      "memory is host memory.",
      "",
      f"Machine: {_timing.machine()}; Python {platform.python_version()}.",
      "",
      "| loader | load s | RSS after imports MiB | peak RSS MiB | model MiB "
      "| beyond the model MiB |",
      "|---|---:|---:|---:|---:|---:|",
  ]
  for loader, out in rows.items():
    lines.append(f"| {loader} | {out['seconds']:.1f} | {out['base'] / mib:.0f} | "
                 f"{out['peak'] / mib:.0f} | {out['model_bytes'] / mib:.0f} | "
                 f"{out['beyond'] / mib:.0f} |")
  lines += [
      "",
      f"- The streaming loader's design bound (1.3 x the largest shard + one layer): "
      f"{bound / mib:.0f} MiB beyond the model; measured {ours / mib:.0f} MiB "
      f"({'within' if ours <= bound else 'ABOVE'} the bound).",
      f"- Reading whole shards (the peer) held {rows['whole_shards']['beyond'] / mib:.0f} MiB "
      f"beyond the model: {rows['whole_shards']['beyond'] / max(ours, 1):.1f}x ours.",
      "- Peak RSS depends on the allocator and on how the kernel backs freed pages, so these "
      "figures hold for this machine; the tests assert the live-buffer bound, which does not.",
  ]
  text = "\n".join(lines) + "\n"
  print(text)
  if args.write:
    REPORT.write_text(text)


if __name__ == "__main__":
  main()
