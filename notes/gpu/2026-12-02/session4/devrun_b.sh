# Device call B (nvidia-h200), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap:
#   bash notes/gpu/2026-12-02/session4/devrun_b.sh
# Issue 33: the timing stage for 07 and 08 (benchmarks/timing_ranking.py); issue 30: the two memory
# tests of tests/test_limits.py after their change for cgroup v2's group kill.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 330 python3 benchmarks/timing_ranking.py --notebooks 07 08 --reruns 3 --out /tmp/tr > $OUT/timing.log 2>&1
echo "exit $?" >> $OUT/timing.log
cp /tmp/tr/*.txt /tmp/tr/*.json $OUT/ 2>/dev/null
timeout 220 python3 -c "from attnlab.grading.sandbox import tasks; tasks.prepare(); import pytest, sys; sys.exit(pytest.main(['tests/test_limits.py', '-q', '-p', 'no:cacheprovider', '-rA', '-k', 'memory_of_children']))" > $OUT/test_limits.txt 2>&1
echo "exit $?" >> $OUT/test_limits.txt
tail -30 $OUT/timing.log; cat $OUT/summary.txt 2>/dev/null; tail -25 $OUT/test_limits.txt
