# Device call (nvidia-h200), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap; .gpu/wheels must also hold the
# pyseccomp wheel (here: `pip download pyseccomp==0.1.2 --no-deps -d .gpu/wheels`, a pure-Python wheel):
#   bash notes/gpu/2026-12-02/session4/devrun_redteam.sh
# Issue 30's last four findings on the H200: the seccomp filter with CUDA and Triton in bwrap and forked
# kernels; the iopub cap (grader's peak RSS under a 3 x 256 MiB print); the dummy-dot shortcut.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 150 python3 notes/gpu/2026-12-02/session4/redteam_cuda.py > $OUT/seccomp_cuda.log 2>&1; echo "exit $?" >> $OUT/seccomp_cuda.log
timeout 240 python3 -m pytest tests/test_limits.py -q -p no:cacheprovider -k "keyrings or flood" > $OUT/limits.log 2>&1
echo "exit $?" >> $OUT/limits.log
timeout 100 python3 -m pytest tests/test_work_ledger.py -q -p no:cacheprovider -k "dummy" > $OUT/ledger.log 2>&1
echo "exit $?" >> $OUT/ledger.log
tail -8 $OUT/seccomp_cuda.log; tail -8 $OUT/limits.log; tail -4 $OUT/ledger.log
