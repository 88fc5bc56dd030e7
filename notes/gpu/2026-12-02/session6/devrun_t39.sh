#!/usr/bin/env bash
# Issue 34 item 3: notebook 09's forward (fixed, autotuned, + TMA, + warp spec., + persistent, FP8) and
# cuDNN, timed under triton 3.6 (the device's, torch 2.11's own) and triton 3.9 side by side on one GPU.
# Triton 3.9 travels as a slimmed wheel tree (no AMD backend, no proton/cupti, libtriton stripped):
#   run(carry=[".gpu/triton39"], command="bash notes/gpu/2026-12-02/session6/devrun_t39.sh")
# VERSIONS="36 39" picks the Tritons; WS_PROBE=1 also runs ws_probe.py; SKIP_TUNING=1 leaves tuning_gpu.py out.
set -u
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
SHAPES=${SHAPES:-64x4096,64x16384,128x8192,128x16384,64x1024,128x1024}
mkdir -p /tmp/t39 && tar xJf .gpu/triton39/triton39-slim.tar.xz -C /tmp/t39 && tar xJf .gpu/triton39/amd-nolib.tar.xz -C /tmp/t39 && ln -sf ptxas /tmp/t39/triton/backends/nvidia/bin/ptxas-blackwell  # sliced out of the wheel; 3.9 looks for it on sm_90 too
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for v in ${VERSIONS:-36 39}; do
  [ -n "${SKIP_TUNING:-}" ] && break
  if [ $v = 39 ]; then PP=/tmp/t39:$PWD/src; else PP=$PWD/src; fi
  PYTHONPATH=$PP python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, triton.__file__, 'cudnn', torch.backends.cudnn.version())"
  PYTHONPATH=$PP TRITON_CACHE_DIR=/tmp/tcache$v timeout 280 python3 benchmarks/tuning_gpu.py "$OUT/t$v" ${BUDGET:-150} --warp-spec --shapes "$SHAPES" \
    > "$OUT/t$v.log" 2>&1
  echo "triton $v rc $?"; grep -v "^check\|^smem\|^{" "$OUT/t$v.log" | tail -45
done
if [ -n "${WS_PROBE:-}" ]; then
  for v in ${VERSIONS:-36 39}; do
    if [ $v = 39 ]; then PP=/tmp/t39:$PWD/src; else PP=$PWD/src; fi
    PYTHONPATH=$PP TRITON_CACHE_DIR=/tmp/tcache$v timeout 200 python3 notes/gpu/2026-12-02/session6/ws_probe.py 2>&1 \
      | grep -v "^ *%\|^   \|^#\|^module\|^}\|^$" > "$OUT/ws_probe_t$v.log"; echo "ws probe $v rc $?"; grep -E "TFLOP|Error|triton" "$OUT/ws_probe_t$v.log"
  done
fi
