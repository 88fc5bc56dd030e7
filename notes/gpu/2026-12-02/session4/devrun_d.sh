# Device call D (nvidia-h200), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap:
#   bash notes/gpu/2026-12-02/session4/devrun_d.sh
# (c) of devrun_c.sh again after the sandboxed timing worker's fix (f8aefa8): the timing stage's cost per
# submission, sandboxed as in grading; then issue 35 item 3's per-student seeds on GPU-sized hidden cases.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python3 notes/gpu/2026-12-02/session4/c/cost.py --json $OUT/c_cost.json > $OUT/c_cost.txt 2>&1
echo "exit $?" >> $OUT/c_cost.txt
timeout 280 python3 notes/gpu/2026-12-02/session4/variants_seeds_gpu.py > $OUT/variants_seeds.log 2>&1
echo "exit $?" >> $OUT/variants_seeds.log
cat $OUT/c_cost.txt; grep -v "Warning\|warn(" $OUT/variants_seeds.log | tail -20
