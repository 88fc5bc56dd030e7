set -u
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.gpu/wheels/*.whl "$ROOT"/.gpu/wheels-grade/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT/r
t=$(date +%s)
python3 -c "from attnlab.grading.bytecode import compile_kernel_imports as c; print('byte-compiled:', c())" | tee $OUT/r/bytecode.txt
echo "one-time byte compile: $(( $(date +%s) - t )) s" | tee -a $OUT/r/bytecode.txt
for i in 1 2; do /usr/bin/time -f "import torch (no byte code writes): wall=%e user=%U sys=%S" env PYTHONDONTWRITEBYTECODE=1 python3 -c "import torch"; done 2>&1 | tee -a $OUT/r/bytecode.txt
SKIP_INSTALL=1 OUT=$OUT DEADLINE=${DEADLINE:-330} CLASS=${CLASS:-48} PLAN="${PLAN}" bash benchmarks/grading_scale_gpu.sh
left=$(( 555 - SECONDS )); echo "check 07 with $left s"
cd $ROOT && OUT=$OUT/check SKIP_DECODE=1 bash benchmarks/run_gpu_check.sh $left 07; tail -3 $OUT/check/notebooks.log
