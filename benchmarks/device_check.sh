#!/usr/bin/env bash
# Mahler & Yum (2024) at full size on a GPU, once: the measurement issue 37 asks for the
# first time a GPU is lent. At most about 8 minutes; run from the repository root:
#
#     bash benchmarks/device_check.sh            # results also under $OUT (or ./device_check_out)
#
# 1. the full model (50 x 2 x 5 x 40 x 5 x 2^4 states x 3 x 50 x 40 actions, 39 periods,
#    float64), factored (wealth splayed in chunks of $BATCH where set): first solve
#    (compile + run), one steady solve validated and one with validate="off", pairs per
#    second, the device's memory statistics (jax.devices()[0].memory_stats()) and peak RSS;
# 2. a simulation of 10^4 subjects from the reference initial distribution (own timeout).
# Each step prints one "RESULT {json}" line (benchmarks/mahler_yum.py --child).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./device_check_out}"
mkdir -p "$OUT"
BATCH="${BATCH:-0}"  # 0: no splay (the factored solve fits)
PY="${PYTHON:-python}"
[ -x /work/venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=/work/venv/bin/python
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
"$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1 | tee -a "$OUT/gpu.txt"

echo "== step 1: full solve, wealth batch_size=$BATCH"
timeout --kill-after=10 330 "$PY" benchmarks/mahler_yum.py --child full --x64 --batch-size "$BATCH" \
    --repeats 1 --subjects 0 --no-xla-memory 2>&1 | tee "$OUT/solve.txt"
echo "step 1 rc ${PIPESTATUS[0]}"

echo "== step 2: simulate 10^4 subjects (solve first, then simulate)"
timeout --kill-after=10 130 "$PY" benchmarks/mahler_yum.py --child full --x64 --batch-size "$BATCH" \
    --repeats 0 --subjects 10000 --no-xla-memory 2>&1 | tee "$OUT/simulate.txt"
echo "step 2 rc ${PIPESTATUS[0]}"
# Peak figures to compare against (H200 SXM): HBM3e about 4.8 TB/s, FP64 about 67 TFLOP/s.
# pairs_per_s in the RESULT lines is per state-action pair of the plain product.
