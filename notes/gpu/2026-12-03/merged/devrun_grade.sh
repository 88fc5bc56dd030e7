# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap (both from benchmarks/stage_gpu_kit.sh):
#   bash notes/gpu/2026-12-03/merged/devrun_grade.sh
# `make grade` on the H200 host with the merged main of the seventh/eighth sessions: every sample
# submission of both assignments sandboxed (bwrap), GPU cases included, the per-product tensor-core rule
# (checking/flow.py) and the checking harness in place. Expected: reference full, blank 0, typical mistakes
# as on the CPU (7/49, 16/32).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c "import sys, torch, triton, nbgrader; print(sys.version.split()[0], torch.__version__, triton.__version__, nbgrader.__version__)"
  bwrap --version; python3 -c "from attnlab.grading.sandbox import check; print('sandbox:', check())"; } > $OUT/env.txt 2>&1
T0=$(date +%s)
timeout 540 python3 -m attnlab.tools.command grade-samples --jobs 8 > $OUT/grade-samples.log 2>&1
echo "exit $? after $(( $(date +%s) - T0 )) s" >> $OUT/grade-samples.log
cat $OUT/env.txt; grep -E "^(student|reference|blank|typical_mistakes|==|exit)|GPU|needs review" $OUT/grade-samples.log | head -60
