# Device call (nvidia-h200), from a copy of the committed tree at .stage/scale; carry .stage/scale .gpu/wheels .gpu/bwrap:
#   cd .stage/scale && bash notes/gpu/2026-12-02/accounts/devrun.sh
# 1. checks.py (interpreter patches per launch; a sandboxed kernel account using CUDA and Triton);
# 2. `make grade` on this host (grade-samples --jobs 8) and a class of 8 reference submissions at --jobs 8.
set -u
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.gpu/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; id; nvidia-smi -L; ls -l /dev/nvidia*; python3 -c "import sys, torch, triton, numpy; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > $OUT/r/env.txt 2>&1
timeout 240 python3 notes/gpu/2026-12-02/accounts/checks.py > $OUT/r/checks.txt 2>&1
echo "checks: exit $?" >> $OUT/r/checks.txt
REQUIRE_SANDBOX=1 SKIP_INSTALL=1 OUT=$OUT SAMPLES_JOBS=8 KINDS=reference CLASS=8 DEADLINE=${DEADLINE:-400} PLAN="h200-j8:8:8:80" bash benchmarks/grading_scale_gpu.sh
