# Device call (nvidia-h200), carry .gpu/wheels .gpu/wheels-test:  bash notes/gpu/2026-12-02/ledger/devrun.sh
# The work ledger on a GPU host (issue 30 item 1): CPU-sized cases through interpreted twins, GPU-sized compiled.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 540 python3 notes/gpu/2026-12-02/ledger/ledger_h200.py > $OUT/ledger_h200.log 2>&1
echo "exit $?" >> $OUT/ledger_h200.log
grep -v "^\[gpu\]\|Warning\|warn(" $OUT/ledger_h200.log | tail -40
