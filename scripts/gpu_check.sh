#!/usr/bin/env bash
# The GPU check: the measurements that decide the design, about 7 minutes on one H100/H200.
#
#   bash scripts/gpu_check.sh                  # on a machine with a GPU (jax[cuda12] installed)
#   bash scripts/gpu_check.sh --cpu-dry-run    # every step at toy sizes on the CPU (about 1 min)
#
# Runs benchmarks/gpu_check.py once per measurement group, each in a fresh process (XLA
# flags are read when a process starts): host_device, lanes, cmdbuf (three processes:
# command buffers off, default, the full list), device_loop, dispatch, gemm (the dry run:
# the groups that set no flag in one process, cmdbuf off and full in their own). Each group
# appends its lines to $OUT/gpu_check.jsonl as it measures and stops at its budget (the plan
# printed first); a timeout 30 s past the budget stops a group that hangs, and what it wrote
# stays. The dispatch group writes $OUT/dispatch_table.json. Then the report:
# $OUT/gpu_check.md. Files under $OUT (default /tmp/gpu_check, the dry run a fresh temporary
# folder): summary.txt, console.txt, gpu_check.jsonl, dispatch_table.json, gpu_check.md.
# Random bf16 weights drawn on the device: no model file, nothing installed.
# GPU_TESTS=1 also runs the Pallas kernel tests compiled for the GPU (tests/pallas, not the
# interpret classes; up to 140 s more, into $OUT/tests.txt) after the groups. The dispatch
# group checks each kernel's result against its reference either way (same_result).
#
# Back on the development machine, from the JSONL the run brought back:
#   python benchmarks/gpu_check.py --report OUT/gpu_check.jsonl
# writes docs/results/gpu_check.md and this device kind's entry of the shipped dispatch
# table (infernix_jax/pallas/dispatch_table.json); commit both.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
DRY=()
if [ "${1:-}" = --cpu-dry-run ]; then
  DRY=(--cpu-dry-run)
  OUT=${OUT:-$(mktemp -d)}
  export JAX_PLATFORMS=cpu
else
  OUT=${OUT:-/tmp/gpu_check}
fi
mkdir -p "$OUT"
JSONL="$OUT/gpu_check.jsonl"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
CHECK=(benchmarks/gpu_check.py "${DRY[@]}" --jsonl "$JSONL")

{
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv 2>&1
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())"
  git log --oneline -1 2>/dev/null
  $PY benchmarks/gpu_check.py "${DRY[@]}" --plan
} 2>&1 | tee "$OUT/summary.txt"

budget() {  # the groups' planned seconds
  $PY -c "import sys; sys.path.insert(0, 'benchmarks'); import gpu_check as g; \
print(sum((g.DRY_PLAN if '${DRY[*]}' else g.PLAN)[x] for x in '$1'.split()))"
}
rcs=()
run_group() {  # "group [group...]" [args...]: the groups one after the other in one process
  local group=$1 limit
  shift
  limit=$(( $(budget "$group") + 30 ))
  echo "== $group $* (stops at its budget; killed after ${limit} s)"
  # shellcheck disable=SC2086  # one word per group
  timeout "$limit" $PY "${CHECK[@]}" --group $group "$@" 2>&1 | tee -a "$OUT/console.txt"
  rcs+=("$group${1:+ $*}: ${PIPESTATUS[0]}")
}

TABLE=(--table "$OUT/dispatch_table.json")
if [ ${#DRY[@]} -gt 0 ]; then
  # The dry run measures the groups that set no XLA flag in one process (one start, one jax
  # import, the toy models' programs compiled once), then cmdbuf off and full, each in its
  # own process as on the GPU: its flag must be set before jax starts.
  run_group "host_device lanes cmdbuf device_loop dispatch gemm" --cmdbuf default "${TABLE[@]}"
  for mode in off full; do
    run_group cmdbuf --cmdbuf "$mode"
  done
else
  run_group host_device
  run_group lanes
  for mode in off default full; do
    run_group cmdbuf --cmdbuf "$mode"
  done
  run_group device_loop
  run_group dispatch "${TABLE[@]}"
  run_group gemm
fi

if [ "${GPU_TESTS:-0}" = 1 ]; then
  timeout 140 $PY -m pytest tests/pallas -q -p no:cacheprovider -k "not Interpret" \
    --durations=15 > "$OUT/tests.txt" 2>&1
  rcs+=("pallas tests: $?")
fi

if [ ${#DRY[@]} -gt 0 ]; then
  $PY benchmarks/gpu_check.py --report "$JSONL" --out "$OUT/gpu_check.md" \
    --table "$OUT/dispatch_table.json" 2>&1 | tee -a "$OUT/console.txt"
else  # on the GPU machine: the report beside the JSONL; the repository is written back home
  $PY - "$JSONL" "$OUT/gpu_check.md" <<'PYEOF' 2>&1 | tee -a "$OUT/console.txt"
import sys
sys.path.insert(0, "benchmarks")
from _gpu_check_groups import read_lines
from _gpu_check_report import render
open(sys.argv[2], "w").write(render(read_lines(sys.argv[1])))
print("wrote", sys.argv[2])
PYEOF
fi
rcs+=("report: ${PIPESTATUS[0]}")
printf '%s\n' "exit codes:" "${rcs[@]}" | tee -a "$OUT/summary.txt"
echo "results in $OUT"
for rc in "${rcs[@]}"; do
  [ "${rc##*: }" = 0 ] || exit 1
done
