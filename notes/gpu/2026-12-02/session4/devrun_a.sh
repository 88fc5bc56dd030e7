# Device call A (nvidia-h200), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap:
#   bash notes/gpu/2026-12-02/session4/devrun_a.sh
# Issue 30 on the H200: the work ledger's checks and mistakes (ledger_h200.py), then kernels rebuilt from
# source and launched compiled under the no-torch mode (kernel-source/check.py).
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version)" >> $OUT/device.txt
timeout 300 python3 notes/gpu/2026-12-02/ledger/ledger_h200.py > $OUT/ledger_h200.log 2>&1
echo "exit $?" >> $OUT/ledger_h200.log
timeout 240 python3 notes/gpu/2026-12-02/kernel-source/check.py > $OUT/kernel_source.log 2>&1
echo "exit $?" >> $OUT/kernel_source.log
cat $OUT/device.txt
grep -v "^\[gpu\]\|Warning\|warn(" $OUT/ledger_h200.log | tail -40
tail -40 $OUT/kernel_source.log
