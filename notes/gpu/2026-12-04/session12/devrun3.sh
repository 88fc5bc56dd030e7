# Device call 4 (nvidia-h200), carry .gpu/wheels: the review's fixes on the GPU, then the whole `make gpu-test`.
#   bash notes/gpu/2026-12-04/session12/devrun3.sh
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
timeout 540 make gpu-test GPU_PYTHON=python3 > $OUT/gpu_test.log 2>&1
echo "make gpu-test: rc=$? after $(( $(date +%s) - T0 )) s"
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_test.log | tail -20
