#!/usr/bin/env bash
# Issue 27's GPU measurements in one call on a lent GPU machine (bench/README.md, "The GPU recipe against nanoGPT"):
# the gpu-shakespeare-char run beside nanoGPT's train.py (bench/side_by_side.py), then the same-process step
# comparison with nanoGPT's model (bench/bench_step_peer.py), each with its own time limit, logs and results under $OUT.
#
# It runs from the repository root and expects what such a machine lacks in .peers/ (ignored by git, carried):
#   .peers/nanoGPT/   a checkout of github.com/karpathy/nanoGPT (data/shakespeare_char/*.bin may be prepared already)
#   .peers/data/      a copy of TRANSFORMERBOOK_DATA (tinyshakespeare.txt is what these runs read)
#   .peers/whl/       wheels of the package's imports the machine's Python lacks (pooch, platformdirs), if any
# SBS_ARGS and PEER_ARGS replace the two programs' GPU arguments: the default runs the book with CUDA graphs
# (--compile-mode reduce-overhead); SBS_ARGS="--gpu" runs it in torch.compile's default mode; PEER_ARGS=skip leaves
# the step comparison out. On a CPU, as a trial:
#   SBS_ARGS="--max-iters 20" PEER_ARGS="--preset baby-gpt-char --steps 2 --blocks 1 --warmup 1 --profile-steps 1" \
#     OUT=/tmp/out bench/gpu_side_by_side.sh
# An H100 took 394 s for the side by side in the default mode (2026-11-27) and 82 s for the step comparison; the
# limits below (470 s, 110 s) keep the call under the device tool's 600 s.
set -uo pipefail
OUT=${OUT:?set OUT to the folder for logs and results}
PY=${PY:-python3}
SBS_ARGS=${SBS_ARGS:---gpu --pairs 1 --compile-mode reduce-overhead}
PEER_ARGS=${PEER_ARGS:---device cuda --dtype bfloat16 --compile --cudagraphs}
for need in .peers/nanoGPT/train.py .peers/data/tinyshakespeare.txt; do
    [ -e "$need" ] || { echo "missing $need: see the comment at the top of $0" >&2; exit 2; }
done
if compgen -G ".peers/whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .peers/whl/*.whl || exit 2
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} TRANSFORMERBOOK_DATA=$PWD/.peers/data PYTHONUNBUFFERED=1
mkdir -p "$OUT"
{ date -u; command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__)"; git rev-parse HEAD; } 2>&1 | tee "$OUT/machine.txt"
# Runs, checkpoints and compile caches stay on the machine: only logs and the results come back.
# shellcheck disable=SC2086  # the argument strings are meant to split into words
timeout 470 $PY bench/side_by_side.py --nanogpt .peers/nanoGPT --out /tmp/side_by_side $SBS_ARGS 2>&1 \
    | tee "$OUT/side_by_side.log"
cp /tmp/side_by_side/results.json "$OUT/side_by_side.json" 2>/dev/null
cp /tmp/side_by_side/book_0.log "$OUT/book_0.log" 2>/dev/null
cp /tmp/side_by_side/nanogpt_0.log "$OUT/nanogpt_0.log" 2>/dev/null
[ "$PEER_ARGS" = skip ] && exit 0
# shellcheck disable=SC2086
timeout 110 $PY bench/bench_step_peer.py --nanogpt .peers/nanoGPT --out /tmp/step_peer $PEER_ARGS 2>&1 \
    | grep -v "USDT\|_warn_once\|Profiler clears" | tee "$OUT/step_peer.log"
cp /tmp/step_peer/step_peer.json "$OUT/" 2>/dev/null
