# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap (benchmarks/stage_gpu_kit.sh makes them):
#   bash notes/gpu/2026-12-04/session11/devrun.sh
# Issue 33's cost: a class of 16 per assignment (benchmarks/timing_class.py) timed one student at a time
# (3 students) and 8 at a time (all 16), sandboxed as in grading; then the first class again with
# another process keeping the GPU busy for 20 s (--hog 20): who is timed again alone.
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
chmod -R o+rX $PWD /tmp/site 2>/dev/null
timeout ${BUDGET:-540} python3 benchmarks/timing_class.py --students 12 --refs 4 --serial 3 --jobs 8 \
  --hog 20 --json $OUT/class.json > $OUT/class.txt 2>&1
echo "timing_class: rc=$? after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
cat $OUT/env.txt
grep -E "sandbox|students at|ratios by|again alone|   [a-zA-Z0-9-]+ +n=" $OUT/class.txt
grep -E "Error|error|failed|wrong" $OUT/class.txt | head -10
