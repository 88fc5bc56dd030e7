# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap: bash notes/gpu/2026-12-04/session10/gpu_test.sh
# `make gpu-test` as a maintainer runs it on a GPU machine (its two processes), then, with the time left,
# `make grade`'s job (attnlab grade-samples) after the typed-contention change (issue 32).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format=%H 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/env.txt 2>&1
timeout 300 make gpu-test GPU_PYTHON=python3 2>&1 | grep -v '^\[gpu\]' > $OUT/gpu_test.log
echo "make gpu-test: rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
grep -E "passed|failed|^FAILED|^ERROR" $OUT/gpu_test.log | head -20
left=$(( 390 - ($(date +%s) - T0) ))
if [ $left -gt 200 ]; then
  UNSAFE=""; python3 -c "from attnlab.grading.sandbox import check; ok, d = check(); raise SystemExit(0 if ok else 1)" || UNSAFE=--unsafe-no-sandbox
  timeout $left python3 -m attnlab.tools.command grade-samples --jobs 8 $UNSAFE > $OUT/grade.log 2>&1
  echo "grade-samples --jobs 8 $UNSAFE: rc=$? after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
  grep -E "/49|/32|again alone|contended|needs review" $OUT/grade.log | head -20
fi
