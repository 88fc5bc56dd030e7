# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap:  bash notes/gpu/2026-12-04/session11/devrun5.sh
# The last check_reach (a red team's two bypasses closed) with the H200's Triton 3.6: the honest variants and the
# instructor's kernels are read, the bypasses refused; then a class of 3 of the first assignment, 2 at a time.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
chmod -R o+rX $PWD /tmp/site 2>/dev/null
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_timing.py -k "reaching or honest" > $OUT/reach.log 2>&1
echo "reach tests: rc=$?"; tail -2 $OUT/reach.log
timeout 100 python3 benchmarks/timing_class.py --students 3 --refs 0 --serial 1 --jobs 2 \
  --assignments attention_kernels --json $OUT/class5.json > $OUT/class5.txt 2>&1
echo "class: rc=$?"; grep -E "students at|timed again|could not|failed" $OUT/class5.txt | cut -c1-160
