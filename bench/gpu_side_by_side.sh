#!/usr/bin/env bash
# Issue 27's GPU measurements in one call on a lent GPU machine (bench/README.md, "The GPU recipe against nanoGPT"):
# the gpu-shakespeare-char run beside nanoGPT's train.py (bench/side_by_side.py), then bench/bench_step.py's step
# split, each with its own time limit, logs and results under $OUT.
#
# It runs from the repository root and expects what such a machine lacks in .peers/ (ignored by git, carried):
#   .peers/nanoGPT/   a checkout of github.com/karpathy/nanoGPT (data/shakespeare_char/*.bin may be prepared already)
#   .peers/data/      a copy of TRANSFORMERBOOK_DATA (tinyshakespeare.txt is what these runs read)
#   .peers/whl/       wheels of the package's imports the machine's Python lacks (pooch, platformdirs), if any
# SBS_ARGS and STEP_ARGS replace the two programs' GPU arguments, so the script can be tried on a CPU first:
#   SBS_ARGS="--max-iters 20" STEP_ARGS="--steps 3 --train-steps 5" OUT=/tmp/out bench/gpu_side_by_side.sh
set -uo pipefail
OUT=${OUT:?set OUT to the folder for logs and results}
PY=${PY:-python3}
SBS_ARGS=${SBS_ARGS:---gpu --pairs 1}
STEP_ARGS=${STEP_ARGS:---preset gpu-shakespeare-char --device cuda --dtype bfloat16 --compile --peak-tflops 989}
for need in .peers/nanoGPT/train.py .peers/data/tinyshakespeare.txt; do
    [ -e "$need" ] || { echo "missing $need: see the comment at the top of $0" >&2; exit 2; }
done
if compgen -G ".peers/whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .peers/whl/*.whl || exit 2
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} TRANSFORMERBOOK_DATA=$PWD/.peers/data PYTHONUNBUFFERED=1
mkdir -p "$OUT"
{ date -u; command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__)"; git rev-parse HEAD; } 2>&1 | tee "$OUT/machine.txt"
# Runs, checkpoints and compile caches stay on the machine: only logs and the results come back.
timeout 420 $PY bench/side_by_side.py --nanogpt .peers/nanoGPT --out /tmp/side_by_side $SBS_ARGS 2>&1 \
    | tee "$OUT/side_by_side.log"
cp /tmp/side_by_side/results.json "$OUT/side_by_side.json" 2>/dev/null
timeout 150 $PY bench/bench_step.py $STEP_ARGS 2>&1 | tee "$OUT/bench_step.log"
