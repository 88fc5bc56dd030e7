#!/usr/bin/env bash
# Issue 34 item 3: notebook 09's forward (fixed, autotuned, + TMA, + warp spec., + persistent, FP8) and
# cuDNN, timed under triton 3.6 (the device's, torch 2.11's own) and triton 3.9 side by side on one GPU.
# Triton 3.9 travels as a slimmed wheel tree (no AMD backend, no proton/cupti, libtriton stripped):
#   run(carry=[".gpu/triton39"], command="bash notes/gpu/2026-12-02/session6/devrun_t39.sh")
set -u
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
SHAPES=${SHAPES:-64x4096,64x16384,128x8192,128x16384,64x1024,128x1024}
mkdir -p /tmp/t39 && tar xJf .gpu/triton39/triton39-slim.tar.xz -C /tmp/t39
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for v in 36 39; do
  if [ $v = 39 ]; then PP=/tmp/t39:$PWD/src; else PP=$PWD/src; fi
  PYTHONPATH=$PP python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, triton.__file__, 'cudnn', torch.backends.cudnn.version())"
  PYTHONPATH=$PP TRITON_CACHE_DIR=/tmp/tcache$v timeout 280 python3 benchmarks/tuning_gpu.py "$OUT/t$v" ${BUDGET:-150} --warp-spec --shapes "$SHAPES" \
    > "$OUT/t$v.log" 2>&1
  echo "triton $v rc $?"; grep -v "^check\|^smem\|^{" "$OUT/t$v.log" | tail -45
done
