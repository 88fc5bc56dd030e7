# Device call (nvidia-h200), carry .gpu/wheels .gpu/wheels-test (as devrun_a.sh):
#   bash notes/gpu/2026-12-02/session4/devrun_variants.sh
# Issue 35 item 3: 05's and 07's test cells (GPU-sized hidden cases included) with per-student seed keys.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
timeout 280 python3 notes/gpu/2026-12-02/session4/variants_seeds_gpu.py > $OUT/variants_seeds.log 2>&1
echo "exit $?" >> $OUT/variants_seeds.log
cat $OUT/device.txt
grep -v "Warning\|warn(" $OUT/variants_seeds.log | tail -20
