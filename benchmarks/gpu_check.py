"""The GPU check: the measurements that decide the design, one group per process, to JSONL.

Groups, in the order `scripts/gpu_check.sh` runs them (each in a fresh process, so XLA flags
apply), with their planned device-time budgets (`PLAN`):
  host_device  host vs device time per decode step, SmolLM2 and Qwen3-8B at 1 lane: synced
               per call; 50 back-to-back async calls; 16 steps in one `lax.fori_loop` with
               on-device argmax.
  lanes        decode(B) at B = 1 / 8 / 16 x capacity 512 / 2048, unrolled vs stacked.
  cmdbuf       decode(1) and the 16-step loop with command buffers off, default, and an
               explicit full list including WHILE and CONDITIONAL (`--cmdbuf MODE`).
  device_loop  a 16-step device loop vs per-step dispatch at 1 and 8 lanes.
  dispatch     masked_sample at R in {1, 8, 32, 128} (greedy, plain, top-k + top-p) and
               spec_accept / tree_accept at B in {1, 8, 32} (all drafts accepted, early
               rejection): each kernel against its jnp reference in the same process; then
               `dispatch.write_table` writes this device kind's table entry (`--table`).
  gemm         Qwen3-8B products (qkv, o, gate_up, down, LM head) at M = 1, 8, 40.

Every line of the JSONL carries the device kind, the group, a label, the configuration and
the figures (or `skipped` and why). Weights are random, drawn per layer on the device in
bf16 (no model file, no host copy). `--cpu-dry-run` runs every step at toy sizes.

  python benchmarks/gpu_check.py --group host_device --jsonl OUT/gpu_check.jsonl
  python benchmarks/gpu_check.py --group cmdbuf --cmdbuf full --jsonl ...
  python benchmarks/gpu_check.py --plan [--cpu-dry-run]
  python benchmarks/gpu_check.py --report OUT/gpu_check.jsonl [--out MD] [--table JSON]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Seconds of device time per group on an H100 / H200 (compile included): 400 s in all, about
# 7 minutes with the machine's start, leaving a rerun inside a 15-minute allowance.
PLAN = {"host_device": 110, "lanes": 80, "cmdbuf": 75, "device_loop": 40, "dispatch": 70,
        "gemm": 25}
# The dry run's caps (toy sizes; a quiet 2-core CPU needs about half of each).
DRY_PLAN = {"host_device": 40, "lanes": 40, "cmdbuf": 30, "device_loop": 30, "dispatch": 60,
            "gemm": 30}
CMDBUF_MODES = ("off", "default", "full")
# Every command-buffer kind XLA's GPU backend names; the flag takes the whole list (a
# leading "+X" would add only its first entry).
CMDBUF_FULL = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,COLLECTIVES,CONDITIONAL,WHILE"
CMDBUF_FLAGS = {"off": "--xla_gpu_enable_command_buffer=", "default": "",
                "full": f"--xla_gpu_enable_command_buffer={CMDBUF_FULL}"}
DRY_XLA_FLAG = "--xla_backend_optimization_level=0"
LOOP_STEPS = 16  # decode steps inside one fori_loop
ASYNC_CALLS = 50  # back-to-back calls of the async figure


def plan(dry_run: bool) -> dict[str, list[str]]:
  """The labels every group is expected to write (the report says "not measured" for the
  ones absent)."""
  models = ("SmolLM2", "Qwen3-8B")
  lanes, caps, rs, bs = sizes(dry_run)
  ms = (1, 8, 40)
  return {
      "host_device": [f"{m} 1 lane {how}" for m in models
                      for how in ("synced per call", f"{ASYNC_CALLS} async calls",
                                  f"{LOOP_STEPS}-step fori_loop")],
      "lanes": [f"SmolLM2 {layout} B={b} S={s}" for layout in ("unrolled", "stacked")
                for b in lanes for s in caps],
      "cmdbuf": [f"SmolLM2 cmdbuf {mode} {how}" for mode in CMDBUF_MODES
                 for how in ("decode(1)", f"{LOOP_STEPS}-step fori_loop")],
      "device_loop": [f"SmolLM2 B={b} {how}" for b in (lanes[0], lanes[1])
                      for how in ("per-step dispatch", f"{LOOP_STEPS}-step device loop")],
      "dispatch": ([f"masked_sample R={r} {c}" for r in rs
                    for c in ("greedy", "plain", "top-k + top-p")]
                   + [f"{op} B={b} {c}" for op in ("spec_accept", "tree_accept") for b in bs
                      for c in ("all accepted", "early rejection")]),
      "gemm": [f"{name} M={m}" for name in ("qkv", "o", "gate_up", "down", "lm_head")
               for m in ms],
  }


def sizes(dry_run: bool) -> tuple[tuple[int, ...], ...]:
  """(lanes, capacities, masked_sample rows R, acceptance lanes B) of the run."""
  if dry_run:
    return (1, 2), (64,), (2,), (2,)
  return (1, 8, 16), (512, 2048), (1, 8, 32, 128), (1, 8, 32)


def _apply_cmdbuf_flags(mode: str) -> str:
  """Adds mode's flag to XLA_FLAGS (before jax starts) and returns the flag."""
  flag = CMDBUF_FLAGS[mode]
  if flag:
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
  return flag


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog="\n".join(__doc__.splitlines()[1:]))
  parser.add_argument("--group", choices=tuple(PLAN), nargs="+",
                      help="the group to measure (several: one after the other in this "
                           "process, as the dry run does)")
  parser.add_argument("--jsonl", default="", help="append the measurements here")
  parser.add_argument("--cmdbuf", choices=CMDBUF_MODES, default="default",
                      help="command-buffer setting of this process (group cmdbuf)")
  parser.add_argument("--table", default="",
                      help="dispatch table to write this device kind's entry into (group "
                           "dispatch; default: dispatch_table.json beside --jsonl)")
  parser.add_argument("--cpu-dry-run", action="store_true",
                      help="toy sizes on the CPU: every step, same JSONL schema")
  parser.add_argument("--budget", type=float, default=0,
                      help="seconds for each group (default: the plan's)")
  parser.add_argument("--plan", action="store_true", help="print the plan and exit")
  parser.add_argument("--report", default="", help="write the report of this JSONL")
  parser.add_argument("--out", default="", help="the report's path (with --report)")
  args = parser.parse_args(argv)
  budgets = DRY_PLAN if args.cpu_dry_run else PLAN
  if args.plan:
    print(f"GPU check plan ({'CPU dry run, toy sizes' if args.cpu_dry_run else 'device'}):"
          f" {sum(budgets.values())} s of measurement in all")
    for group, labels in plan(args.cpu_dry_run).items():
      print(f"  {group:12s} {budgets[group]:4d} s  {len(labels)} measurements")
    return 0
  if args.report:
    import _gpu_check_report
    return _gpu_check_report.main(Path(args.report), Path(args.out) if args.out else None,
                                  Path(args.table) if args.table else None)
  if not args.group or not args.jsonl:
    parser.error("--group and --jsonl are needed to measure (or --plan, --report)")
  if "cmdbuf" in args.group and args.cmdbuf != "default" and len(args.group) > 1:
    parser.error(f"--cmdbuf {args.cmdbuf} runs group cmdbuf alone: its XLA flag would apply "
                 f"to every group of the process ({' '.join(args.group)})")
  flag = _apply_cmdbuf_flags(args.cmdbuf) if "cmdbuf" in args.group else None
  if args.cpu_dry_run:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # Toy programs timed for their figures' shape only: LLVM's cheapest optimisation level
    # cuts the CPU compiles (most of the dry run's time) by about a third.
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {DRY_XLA_FLAG}".strip()
  import jax
  import _gpu_check_groups as groups
  from _gpu_check_setup import Budget, Log
  if args.cpu_dry_run and jax.default_backend() != "cpu":
    parser.error("--cpu-dry-run runs on the CPU; JAX_PLATFORMS names another platform")
  if not args.cpu_dry_run and jax.default_backend() == "cpu":
    parser.error("no accelerator here (jax sees only the CPU): install jax[cuda12] on a GPU "
                 "machine, or use --cpu-dry-run")
  for group in args.group:
    _measure(args, group, budgets[group], flag, groups, Budget, Log)
  return 0


def _measure(args, group, planned, flag, groups, budget_cls, log_cls) -> None:
  """Runs one group (its own log and budget) and says which planned labels it left out."""
  log = log_cls(Path(args.jsonl), group, args.cpu_dry_run)
  budget = budget_cls(args.budget or planned)
  labels = plan(args.cpu_dry_run)[group]
  if group == "cmdbuf":
    groups.cmdbuf(log, budget, args.cpu_dry_run, args.cmdbuf, flag)
  elif group == "dispatch":
    table = Path(args.table) if args.table else Path(args.jsonl).with_name(
        "dispatch_table.json")
    groups.dispatch(log, budget, args.cpu_dry_run, table)
  else:
    getattr(groups, group)(log, budget, args.cpu_dry_run)
  written = {line["label"] for line in groups.read_lines(Path(args.jsonl))
             if line["group"] == group and line["device_kind"] == log.base["device_kind"]}
  if group == "cmdbuf":
    labels = [label for label in labels if f" {args.cmdbuf} " in label]
  missing = [label for label in labels if label not in written]
  if missing:
    print(f"[{group}] not written: {', '.join(missing)}", flush=True)


if __name__ == "__main__":
  sys.exit(main())
