# Device call (nvidia-h200), carry .gpu/wheels: bash notes/gpu/2026-12-03/session9/gpu_suite3.sh
# gpu_suite2.sh's two test processes again, after the launch_tuning device fix (no grading run).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
date -u > $OUT/env.txt
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_compile.py tests/test_fast_path.py \
  tests/test_decoding.py tests/test_gpu_host_cases.py tests/test_launcher_strides.py tests/test_tuning.py \
  tests/test_kernel_source.py 2>&1 | grep -v '^\[gpu\]' > $OUT/tests_gpu.log
echo "compiled-mode process: $(tail -1 $OUT/tests_gpu.log) after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
TRITON_INTERPRET=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_compile.py \
  tests/test_launcher_strides.py tests/test_tuning.py 2>&1 | grep -v '^\[gpu\]' > $OUT/tests_interp.log
echo "TRITON_INTERPRET=1 process: $(tail -1 $OUT/tests_interp.log) after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
grep -E "^(FAILED|ERROR)" $OUT/tests_*.log | head -20
