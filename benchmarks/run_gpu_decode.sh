#!/usr/bin/env bash
# Notebook 08's GPU follow-up (issue 13; notes/gpu/2026-11-30/08-followup/), run through the device tool
# from the repository root, carrying .gpu (wheels of nbclient/ipykernel/ipywidgets): the decode sweep
# at B = 1 launched from Python and replayed from CUDA graphs (benchmarks/decode_gpu.py --quick), then
# the instructor notebook 08 executed on the GPU (model solution, hidden GPU tests in fp16/bf16, its
# own bench cell). NB: the instructor notebook, built by `attnlab build` (source/ is not committed
# from branches, so build it before staging).
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .gpu/wheels nbclient nbformat ipykernel ipywidgets 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
python3 benchmarks/decode_gpu.py "$OUT" --quick 2>&1 | tee "$OUT/decode_gpu.log"
NB=source/attention_kernels_beyond/08_flash_decoding.ipynb
# DEADLINE (epoch seconds): stop the notebook in time for the outputs to come back
[ -n "${DEADLINE:-}" ] && NB_TIMEOUT_S=$(( DEADLINE - $(date +%s) ))
echo "notebook 08: up to ${NB_TIMEOUT_S:-600} s"
timeout "${NB_TIMEOUT_S:-600}" python3 benchmarks/execute_notebooks.py "$OUT/nb" "$NB" 2>&1 | tee "$OUT/notebook08.log"
[ -f "$OUT/nb/08_flash_decoding.ipynb" ] && mv "$OUT/nb/08_flash_decoding.ipynb" "$OUT/executed_08.ipynb"
rm -rf "$OUT/nb"
