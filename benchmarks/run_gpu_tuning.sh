#!/usr/bin/env bash
# The GPU sessions behind notebook 09's figures (notes/gpu/2026-11-30/09/, 2026-12-01/09/), run through the device tool
# from a copy of the repository (carry .gpu: wheels of nbclient/ipykernel, see notes/gpu-measurements.md).
#   bash benchmarks/run_gpu_tuning.sh measure [BUDGET_S] [--checks]  # benchmarks/tuning_gpu.py
#   bash benchmarks/run_gpu_tuning.sh notebook             # executes source/.../09_tuning_and_fp8.ipynb
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
case "${1:-measure}" in
  measure)
    python3 benchmarks/tuning_gpu.py "$OUT" "${2:-330}" ${3:-} 2>&1 | tee "$OUT/tuning_gpu.log" | grep -v "^check\|^smem" | tail -60 ;;
  notebook)
    W=${WHEELS:-.gpu/wheels}; [ -d "$W" ] || W=../../.gpu/wheels   # run from a copy at .stage/<branch>
    python3 -m pip install -q --no-index --find-links "$W" nbclient nbformat ipykernel ipywidgets 2>&1 | tail -2
    NB=source/attention_kernels_beyond/09_tuning_and_fp8.ipynb
    python3 benchmarks/execute_notebooks.py "$OUT/nb" "$NB" 2>&1 | tee "$OUT/notebook09.log"
    tar -czf "$OUT/executed_09.tar.gz" -C "$OUT" nb && rm -rf "$OUT/nb" ;;
esac
