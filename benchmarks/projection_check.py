"""The speedup projection's step model against measured step times on this machine's device.

The acceptance studies project speedups onto other hardware with a roofline model of the
target's steps (`experiments/runner/projection.py`). This script measures decode(1) and
verify(P) of random-weight models with the published shapes (step time depends on shapes,
not weights) on the local device and prints measured / projected per step, and the ratio
that drives a projected speedup, verify(P) / decode(1), measured beside projected.

The device's roofline: an H200 or TPU v5e by its device kind (spec sheets, as projected);
any other device (this CPU) from its measured GEMV bandwidth and a stated dense rate.

  .venv/bin/python benchmarks/projection_check.py [--models SmolLM2-135M-Instruct,Qwen3-0.6B]
      [--dtype float32] [--batch 1,4] [--p 5,9] [--prompt 256] [--steps 16]
      [--flops 280e9] [--json FILE] [--write] [--out FILE]
  .venv/bin/python benchmarks/projection_check.py --from-json FILE --out REPORT

`--write` writes docs/results/projection_check.md (or --out); `--from-json` writes the report
of a run measured elsewhere (docs/results/projection_check_h200.md: `scripts/gpu_check.sh`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
from flax import nnx  # noqa: E402

import _timing  # noqa: E402  (the benchmarks folder is the script's path)
from model_bench import step_times  # noqa: E402
from experiments.runner import projection  # noqa: E402
from infernix_jax import models as im  # noqa: E402
from infernix_jax.models import config as presets  # noqa: E402

REPORT = ROOT / "docs/results/projection_check.md"


def device_hardware(dtype: str, flops: float, gemv_repeats: int) -> projection.Hardware:
  """The roofline of the local device: a projected accelerator by its kind, else measured."""
  kind = jax.devices()[0].device_kind
  weight_bytes = 4 if dtype == "float32" else 2
  for hw in projection.HARDWARE:
    if hw.name.replace(" ", "").lower() in kind.replace(" ", "").lower():
      return projection.Hardware(hw.name, hw.hbm_bytes_per_s, hw.bf16_flops,
                                 hw.step_overhead_s, weight_bytes)
  bandwidth = _timing.gemv_bandwidth(gemv_repeats)
  return projection.Hardware(f"{kind} (measured {bandwidth / 1e9:.0f} GB/s, {flops / 1e9:.0f} "
                             "GFLOP/s stated)", bandwidth, flops, 20e-6, weight_bytes)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--models", default="SmolLM2-135M-Instruct,Qwen3-0.6B",
                      help=f"comma-separated presets: {', '.join(presets.PRESETS)}")
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--batch", default="1,4", help="lanes, comma-separated")
  parser.add_argument("--p", default="5,9", help="verified positions (K + 1), comma-separated")
  parser.add_argument("--prompt", type=int, default=256, help="cached context positions")
  parser.add_argument("--steps", type=int, default=16, help="timed calls per step kind")
  parser.add_argument("--flops", type=float, default=280e9,
                      help="dense rate of a device without a spec sheet here (this CPU's f32)")
  parser.add_argument("--gemv-repeats", type=int, default=10)
  parser.add_argument("--json", default="", help="also write the rows as JSON here")
  parser.add_argument("--write", action="store_true", help=f"write {REPORT.relative_to(ROOT)}")
  parser.add_argument("--out", default="", help="the report's path with --write or --from-json")
  parser.add_argument("--from-json", default="",
                      help="measure nothing: write the report (--out) of a run's --json, e.g. "
                           "one that scripts/gpu_check.sh brought back from a GPU")
  args = parser.parse_args()
  if args.from_json:
    write_report(json.loads(Path(args.from_json).read_text()),
                 Path(args.out) if args.out else REPORT)
    return 0
  names = [m.strip() for m in args.models.split(",") if m.strip()]
  unknown = [m for m in names if m not in presets.PRESETS]
  if unknown:
    parser.error(f"--models: unknown {', '.join(unknown)}; known: {', '.join(presets.PRESETS)}")
  batches = [int(x) for x in args.batch.split(",")]
  ps = [int(x) for x in args.p.split(",")]
  hw = device_hardware(args.dtype, args.flops, args.gemv_repeats)
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}; roofline: {hw.name}",
        flush=True)
  rows = []
  for name in names:
    cfg = presets.PRESETS[name].replace(dtype=args.dtype)
    model = im.Transformer(cfg, rngs=nnx.Rngs(0))
    for b in batches:
      _, decode_s, verify_s = step_times(cfg, model, batch=b, prompt=args.prompt,
                                         positions=ps, steps=args.steps)
      proj = lambda p: projection.target_seconds(  # noqa: E731
          hw, cfg, lanes=b, positions=p, context=args.prompt)
      for p in [1, *ps]:
        measured = decode_s if p == 1 else verify_s[p]
        row = {"model": name, "lanes": b, "positions": p, "measured_ms": 1e3 * measured,
               "projected_ms": 1e3 * proj(p),
               "measured_over_decode": measured / decode_s,
               "projected_over_decode": proj(p) / proj(1)}
        rows.append(row)
        print(f"{name:24s} B={b:<3d} P={p:<3d} measured {row['measured_ms']:8.2f} ms  "
              f"projected {row['projected_ms']:8.2f} ms  x{measured / proj(p):5.2f}  "
              f"t(P)/t(1) {row['measured_over_decode']:5.2f} vs "
              f"{row['projected_over_decode']:5.2f}", flush=True)
    del model
  run = {"hardware": hw.name, "date": str(datetime.date.today()),
         "machine": platform.machine(), "device": jax.devices()[0].device_kind,
         "jax": jax.__version__, "dtype": args.dtype, "prompt": args.prompt,
         "steps": args.steps, "rows": rows}
  if args.json:
    Path(args.json).write_text(json.dumps(run, indent=1))
  if args.write:
    write_report(run, Path(args.out) if args.out else REPORT)
  return 0


def write_report(run: dict, path: Path) -> None:
  """The markdown report of one run (`main`'s JSON: the rows and the run's facts) -> path."""
  rows, hw_name = run["rows"], run["hardware"]
  lines = ["# The speedup projection's step model vs measured step times", "",
           f"Written by `benchmarks/projection_check.py` from a run on {run['date']} "
           f"({run['machine']}, {run['device']}, jax {run['jax']}); "
           f"{run['dtype']} random-weight models of the published shapes, {run['prompt']} "
           f"cached positions, medians of {run['steps']} interleaved calls. Roofline: "
           f"{hw_name}, 20 us per step.", "",
           "A projected speedup depends on the steps through t(verify P) / t(decode 1); the "
           "last two columns compare that ratio measured and projected. measured / "
           "projected above 1 is time the roofline does not see (dispatch, attention and "
           "norm kernels below peak).", "",
           "| model | lanes | P | measured ms | projected ms | measured / projected | "
           "t(P)/t(1) measured | t(P)/t(1) projected |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
  lines += [f"| {r['model']} | {r['lanes']} | {r['positions']} | {r['measured_ms']:.2f} | "
            f"{r['projected_ms']:.2f} | {r['measured_ms'] / r['projected_ms']:.2f} | "
            f"{r['measured_over_decode']:.2f} | {r['projected_over_decode']:.2f} |"
            for r in rows]
  over = [r["measured_over_decode"] / r["projected_over_decode"] for r in rows
          if r["positions"] > 1]
  if over:
    lines += ["", f"Over all verify rows, measured t(P)/t(1) is x{min(over):.2f}-"
              f"{max(over):.2f} the projected one: a projected speedup on this device is "
              "off by about that factor (above 1: the projection is optimistic, the verify "
              "costing more than its roofline says; below 1: pessimistic). The acceptance "
              "studies' columns project onto an H200 and a TPU v5e, whose check is "
              "`scripts/gpu_check.sh` on such a device."]
  path.write_text("\n".join(lines) + "\n")
  print(f"wrote {path}")


if __name__ == "__main__":
  sys.exit(main())
