# Device call (nvidia-h200), carry .gpu/wheels .gpu/bwrap:  bash notes/gpu/2026-12-04/session11/devrun4.sh
# The final code of the session (the grader's turn with its limits, kernels that reach Python refused, results
# read field by field): (a) the compile_only GPU test and the GPU-side kernel-source tests; (b) the class of 16
# per assignment one at a time (2) and 8 at a time, the first class again beside a busy GPU (--hog 20).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
chmod -R o+rX $PWD /tmp/site 2>/dev/null
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_fast_path.py -k "compile_only or cuda_graph" > $OUT/gpu_tests.log 2>&1
echo "gpu tests: rc=$? after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
tail -3 $OUT/gpu_tests.log
timeout 420 python3 benchmarks/timing_class.py --students 12 --refs 4 --serial 2 --jobs 8 --hog 20 \
  --json $OUT/class.json > $OUT/class.txt 2>&1
echo "timing_class: rc=$? after $(( $(date +%s) - T0 )) s" | tee -a $OUT/env.txt
cat $OUT/env.txt
grep -E "sandbox|students at|ratios by|again alone|   [a-zA-Z0-9-]+ +n=" $OUT/class.txt | cut -c1-200
grep -E "Error|error|failed|wrong|could not" $OUT/class.txt | head -10
