#!/usr/bin/env bash
# Issue 34 item 3, backward: a wider tile search for notebook 07's reference backward at T=4096, causal, bf16
# (benchmarks/backward.py's tuning step), under triton 3.6 and 3.9 (carry .gpu/triton39, see devrun_t39.sh).
set -u
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1 ATTNLAB_BWD_SEARCH=wide ATTNLAB_BWD_TUNE_ONLY=1
mkdir -p /tmp/t39 && tar xJf .gpu/triton39/triton39-slim.tar.xz -C /tmp/t39 && tar xJf .gpu/triton39/amd-nolib.tar.xz -C /tmp/t39 \
  && ln -sf ptxas /tmp/t39/triton/backends/nvidia/bin/ptxas-blackwell
for v in ${VERSIONS:-36 39}; do
  if [ $v = 39 ]; then PP=/tmp/t39:$PWD/src; else PP=$PWD/src; fi
  PYTHONPATH=$PP TRITON_CACHE_DIR=/tmp/tcb$v timeout 270 python3 benchmarks/backward.py \
    source/attention_kernels_beyond/07_triton_backward.ipynb "$OUT/bwd$v" > "$OUT/bwd$v.log" 2>&1
  echo "triton $v rc $?"; grep -E "tune|cfg=|Error|triton" "$OUT/bwd$v.log" | cut -c1-160
done
