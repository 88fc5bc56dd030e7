# Device call (nvidia-h200), carry .gpu/wheels: bash notes/gpu/2026-12-03/merged/devrun.sh
# The seventh session's merged main on the GPU: the compile gate as a package (gpu_compile/), the checking
# harness and contracts, the GPU-only tests (launchers replayed from CUDA graphs, decode at large head dims),
# the kernels' checkers on GPU-sized cases.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
timeout 330 python3 -m pytest tests/test_fast_path.py tests/test_decoding.py tests/test_gpu_compile.py tests/test_harness.py \
  tests/test_contracts.py tests/test_gpu_host_cases.py -q -p no:cacheprovider -rfEs 2>&1 | grep -v '^\[gpu\]' > $OUT/tests.log
echo "exit $?" >> $OUT/tests.log
tail -30 $OUT/tests.log
