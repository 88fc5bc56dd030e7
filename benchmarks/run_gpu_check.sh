#!/usr/bin/env bash
# A release check on one GPU within a time budget (device tool, from the repository root, carrying .gpu):
#   bash benchmarks/run_gpu_check.sh BUDGET_S [NN ...]
# Executes the listed source notebooks (model solutions with their hidden GPU tests) in the order
# given, one at a time, each bounded by what is left of BUDGET_S, after the decode step's timing
# (benchmarks/decode_gpu.py --quick: launched from Python and from a CUDA graph). Logs go to $OUT;
# the executed notebooks stay on the machine (their plots are large). Exit status 1 if a cell raised.
set -uo pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${1:-500}; shift
START=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .gpu/wheels nbclient nbformat ipykernel ipywidgets 2>&1 | tail -2
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
  git log -1 --format='commit %H' 2>/dev/null; } | tee "$OUT/env.txt"
if [ -z "${SKIP_DECODE:-}" ]; then  # SKIP_DECODE=1: notebooks only
  mkdir -p "$OUT/decode"
  timeout 90 python3 benchmarks/decode_gpu.py "$OUT/decode" --quick > "$OUT/decode_gpu.log" 2>&1
  echo "decode_gpu: exit $? after $(( $(date +%s) - START )) s" | tee -a "$OUT/env.txt"
fi
status=0
for nn in "$@"; do
    left=$(( START + BUDGET_S - $(date +%s) ))
    [ "$left" -lt 20 ] && { echo "$nn: not run ($left s left)" | tee -a "$OUT/notebooks.log"; continue; }
    nb=$(ls source/attention_kernels*/"$nn"_*.ipynb)
    timeout "$left" python3 benchmarks/execute_notebooks.py /tmp/nb "$nb" >> "$OUT/notebooks.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$nn: exit $rc, $(( $(date +%s) - START )) s since start" | tee -a "$OUT/notebooks.log"
done
exit $status
