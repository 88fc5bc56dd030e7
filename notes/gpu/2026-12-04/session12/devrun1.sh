# Device call 1 (nvidia-h200), carry .gpu/wheels:  bash notes/gpu/2026-12-04/session12/devrun1.sh
# The new code's GPU tests (occupancy, split count, FP8 block scales), the split rules side by side, and
# FP8 with block scales (accuracy on FA3's test, speed against cuDNN).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version(), 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_fp8_kernel.py tests/test_decoding.py tests/test_fast_path.py \
  -k "fp8 or default_split or large_head or cuda_graph or compile_only" > $OUT/gpu_tests.log 2>&1
echo "gpu tests: rc=$? after $(( $(date +%s) - T0 )) s"; tail -15 $OUT/gpu_tests.log
OUT=$OUT timeout 200 python3 notes/gpu/2026-12-04/session12/decode_rules.py > $OUT/decode_rules.txt 2>&1
echo "decode_rules: rc=$? after $(( $(date +%s) - T0 )) s"; grep -v "^\[gpu\]" $OUT/decode_rules.txt | tail -40
timeout 170 python3 notes/gpu/2026-12-04/session12/fp8_blocks.py > $OUT/fp8_blocks.txt 2>&1
echo "fp8_blocks: rc=$? after $(( $(date +%s) - T0 )) s"; grep -v "Warning\|warn(" $OUT/fp8_blocks.txt | tail -30
