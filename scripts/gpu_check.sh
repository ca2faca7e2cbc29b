#!/usr/bin/env bash
# GPU check of infernix_jax.pallas (issue 3), prepared for a session that is lent a GPU.
#
# Runs, from the repository root, with the machine's own python3 (JAX with CUDA; nothing is
# installed from the network):
#   1. the pallas tests with interpret mode off (the *Gpu test classes compile and run the
#      Triton kernels and compare them with the jnp reference) plus the reference tests;
#   2. the benchmark (R = 8, 32, 128; Vm = 151,936; bf16 logits): kernel vs unfused baseline
#      ratio, fraction of HBM bandwidth, and spec_accept (K = 4) vs the jnp reference;
#   3. a tiling sweep (block_words x num_warps) of the masked_sample kernel at R = 128.
# Everything is written under $OUT (default /tmp/gpu_check). Budget: ~8 minutes in all.
#
#   OUT=/tmp/x PY=python3 bash scripts/gpu_check.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c "import jax; print('jax', jax.__version__, jax.devices(), jax.default_backend())"
  git log --oneline -1 2>/dev/null
} 2>&1 | tee "$OUT/env.txt"

# 1. Kernel tests with interpret off (the interpret classes are CPU coverage; skipped here).
timeout 240 $PY -m pytest tests/pallas -q -p no:cacheprovider -k "not Interpret" \
  --durations=15 2>&1 | tee "$OUT/tests.txt"
rc_tests=${PIPESTATUS[0]}

# 2. Benchmark (bf16 logits: the HBM goal is stated for bf16 at R = 128), plus spec_accept K=4.
timeout 150 $PY benchmarks/kernels_bench.py --rows 8,32,128 --dtype bfloat16 --repeats 20 \
  --spec 4 --json "$OUT/bench_bf16.json" 2>&1 | tee "$OUT/bench_bf16.txt"
rc_bench=${PIPESTATUS[0]}

# 3. Tiling sweep of the masked_sample kernel at R = 128 (data for choosing BlockSizes).
timeout 90 $PY benchmarks/kernels_bench.py --rows 128 --dtype bfloat16 --repeats 10 \
  --sweep 32,64,128,256 --warps 4,8 --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.txt"
rc_sweep=${PIPESTATUS[0]}

echo "tests rc=$rc_tests bench rc=$rc_bench sweep rc=$rc_sweep" | tee "$OUT/summary.txt"
[ "$rc_tests" = 0 ] && [ "$rc_bench" = 0 ] && [ "$rc_sweep" = 0 ]
