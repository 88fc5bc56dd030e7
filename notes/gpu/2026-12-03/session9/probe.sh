# Device call (nvidia-h200), carry .gpu/wheels: bash notes/gpu/2026-12-03/session9/probe.sh
# Which test leaves Triton's standard library interpreted on a GPU host (devrun.sh's 12 failures), and which
# failures remain when each GPU test file runs alone.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
cat > /tmp/trace_plugin.py <<'PY'
import os
import triton.language.standard as s
def _state():
    return type(s.cdiv).__name__ + " env=" + str(os.environ.get("TRITON_INTERPRET"))
print("[trace] at start", _state())
def pytest_collection_finish(session):
    print("[trace] after collection", _state())
_last = [None]
def pytest_runtest_logfinish(nodeid, location):
    now = _state()
    if now != _last[0]:
        print("[trace] after", nodeid, now)
        _last[0] = now
PY
export PYTHONPATH=$PYTHONPATH:/tmp
timeout 200 python3 -m pytest -p trace_plugin tests/test_fast_path.py tests/test_decoding.py tests/test_gpu_compile.py -q -p no:cacheprovider -s 2>&1 | grep -E "^\[trace\]|passed|failed" > $OUT/trace.log
for f in test_fast_path test_decoding test_gpu_host_cases; do
  timeout 150 python3 -m pytest tests/$f.py -q -p no:cacheprovider -rfE 2>&1 | grep -v '^\[gpu\]' > $OUT/alone_$f.log
done
tail -5 $OUT/trace.log; head -30 $OUT/trace.log; for f in $OUT/alone_*.log; do echo "== $f"; grep -E "^(FAILED|E  )|passed|failed" $f | head -12; done
