#!/usr/bin/env bash
# The device lane (issue 59): benchmarks/device_check.py on the default device (a TPU, a
# GPU, or the CPU), within 8 minutes, its output kept under $OUT (./device_check_out
# without one). Run from the repository root with the project importable:
#
#     bash benchmarks/device_check.sh              # every program (docs/tuning.md's table)
#     bash benchmarks/device_check.sh --quick      # small sizes: a smoke run
#     bash benchmarks/device_check.sh --only solve,simulate
#
# Then, on an accelerator, the device tests in one process (the chip admits one at a
# time): python -m pytest -m device -p no:xdist
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./device_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
    "$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())'
} 2>&1 | tee "$OUT/device.txt"
timeout --kill-after=10 "${LIMIT:-470}" "$PY" benchmarks/device_check.py --json "$OUT/device_check.json" "$@" \
    2>&1 | grep -v "Warning\|warnings.warn" | tee "$OUT/device_check.txt"
status=${PIPESTATUS[0]}
echo "device_check rc $status"
exit "$status"
