# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap: bash notes/gpu/2026-12-03/session9/gpu_suite2.sh
# After the fixes of gpu_suite.sh's findings: 1. GPU test files in one compiled-mode process (the interpreter
# modules must skip), 2. the interpreter modules in a TRITON_INTERPRET=1 process, 3. `make grade` on the H200.
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/env.txt 2>&1
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_gpu_compile.py tests/test_fast_path.py \
  tests/test_decoding.py tests/test_gpu_host_cases.py tests/test_launcher_strides.py tests/test_tuning.py \
  tests/test_kernel_source.py 2>&1 | grep -v '^\[gpu\]' > $OUT/tests_gpu.log
echo "compiled-mode process: $(tail -1 $OUT/tests_gpu.log) after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
TRITON_INTERPRET=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_compile.py \
  tests/test_launcher_strides.py tests/test_tuning.py 2>&1 | grep -v '^\[gpu\]' > $OUT/tests_interp.log
echo "TRITON_INTERPRET=1 process: $(tail -1 $OUT/tests_interp.log) after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 -m attnlab.tools.command grade-samples --jobs 8 > $OUT/grade.log 2>&1
echo "grade-samples --jobs 8: rc=$? after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
echo "review notes naming a thread: $(grep -c 'a thread running notebook code' $OUT/grade.log)" | tee -a $OUT/env.txt
grep -E "^(FAILED|ERROR)" $OUT/tests_*.log | head -20; grep -E "score|marks|sanity|graded [0-9]" $OUT/grade.log | head -20
