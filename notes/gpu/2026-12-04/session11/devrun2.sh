# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap:  bash notes/gpu/2026-12-04/session11/devrun2.sh
# (a) the timing stage's order of 08's and 05's variants against CUDA events (benchmarks/timing_ranking.py;
#     08's variants moved since 2026-12-02 with the decode launcher's split rule and stages);
# (b) make gpu-test after gpu_compile.compile_only (both processes).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
date -u > $OUT/env2.txt
timeout 200 python3 benchmarks/timing_ranking.py --notebooks 08 05 --reruns 1 --events-reps 50 --out /tmp/tr > $OUT/ranking.log 2>&1
echo "timing_ranking: rc=$? after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env2.txt
cp /tmp/tr/summary.txt $OUT/ranking_summary.txt 2>/dev/null; cat $OUT/ranking_summary.txt
timeout 330 make gpu-test GPU_PYTHON=python3 2>&1 | grep -v '^\[gpu\]' > $OUT/gpu_test.log
echo "make gpu-test: rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env2.txt
grep -E "passed|failed|^FAILED|^ERROR" $OUT/gpu_test.log | head -20
