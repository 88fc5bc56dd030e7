# Device call (nvidia-h200), carry .gpu/wheels .gpu/wheels-test: bash notes/gpu/2026-12-02/session6/devrun_final.sh
# The merged main of the sixth session on the GPU: the GPU-only tests (launchers replayed from CUDA graphs, decode
# at large head dims), notebook 09's model solution with its test cells (the FA3 cell runs the kernel at H=8),
# and the work ledger / checkers of the kernel notebooks through the new harness (test_harness, test_contracts).
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 420 python3 -m pytest tests/test_decoding.py tests/test_fast_path.py tests/test_tuning.py tests/test_harness.py \
  tests/test_contracts.py -q -p no:cacheprovider -rfEs -x 2>&1 | grep -v '^\[gpu\]' > $OUT/tests.log
echo "exit $?" >> $OUT/tests.log
tail -25 $OUT/tests.log
