# Device call (nvidia-h200), from a copy of the committed tree at .stage/scale; carry .stage/scale .gpu/wheels .gpu/bwrap:
#   cd .stage/scale && DEADLINE=540 bash notes/gpu/2026-12-02/forkserver/devrun.sh
# 1. checks.py: kernels forked by the fork server (and one started by bwrap) use CUDA and Triton on the GPU;
# 2. `make grade` on this host (grade-samples --jobs 8), then a class of 48 (all kinds) at --jobs 16,
#    as measured before the fork server on 2026-12-01 (notes/gpu/2026-12-01/grading-4: 221 s).
set -u
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.gpu/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT/r
timeout 200 python3 notes/gpu/2026-12-02/forkserver/checks.py > $OUT/r/checks.txt 2>&1
echo "checks: exit $?" >> $OUT/r/checks.txt
REQUIRE_SANDBOX=1 SKIP_INSTALL=1 OUT=$OUT SAMPLES_JOBS=8 CLASS=48 DEADLINE=${DEADLINE:-540} PLAN="h200-j16:16:48:150" \
  bash benchmarks/grading_scale_gpu.sh
cat $OUT/r/checks.txt >> $OUT/summary.txt
