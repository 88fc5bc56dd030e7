#!/usr/bin/env bash
# The GPU session behind notebook 07's figures (notes/gpu/2026-11-30/), run through the device tool
# from the repository root, carrying .gpu (wheels of nbclient/ipykernel/ipywidgets, see
# notes/gpu-measurements.md): executes the instructor notebook 07 (reference kernels, hidden GPU
# tests in fp16/bf16), then times the backward against SDPA (benchmarks/backward.py).
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .gpu/wheels nbclient nbformat ipykernel ipywidgets 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
NB=source/attention_kernels_beyond/07_triton_backward.ipynb
python3 benchmarks/execute_notebooks.py "$OUT/nb" "$NB" 2>&1 | tee "$OUT/notebook07.log"
python3 benchmarks/backward.py "$NB" "$OUT" 2>&1 | tee "$OUT/backward.log"
tar -czf "$OUT/executed_07.tar.gz" -C "$OUT" nb && rm -rf "$OUT/nb"
