#!/usr/bin/env bash
# The GPU session behind the figures in notes/ (run through the device tool from the repo root):
#   carry .gpu (wheels of nbclient/ipykernel/ipywidgets for Python 3.12, see notes/gpu-runs.md)
#   command: bash benchmarks/run_gpu.sh
# Installs the missing Jupyter pieces offline, executes every source notebook on the GPU (the
# reference solutions with hidden tests, notebook 06's full sweep), then times the kernels.
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .gpu/wheels nbclient nbformat ipykernel ipywidgets 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
mkdir -p "$OUT/nb"
python3 benchmarks/execute_notebooks.py "$OUT/nb" source/attention_kernels/0*.ipynb 2>&1 | tee "$OUT/notebooks.log"
cp "$OUT"/nb/sweep.png "$OUT"/nb/sweep_results.csv "$OUT"/nb/tuning_results.csv "$OUT"/ 2>/dev/null
python3 benchmarks/softmax_warps.py source/attention_kernels 2>&1 | tee "$OUT/softmax_warps.log"
python3 benchmarks/kernels.py source/attention_kernels "$OUT/kernels.json" 2>&1 | tee "$OUT/kernels.log"
tar -czf "$OUT/executed_notebooks.tar.gz" -C "$OUT" nb && rm -rf "$OUT/nb"
