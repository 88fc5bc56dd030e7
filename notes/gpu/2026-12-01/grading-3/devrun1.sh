set -u
cd .stage/scale
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.gpu/wheels/*.whl "$ROOT"/.gpu/wheels-grade/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH
mkdir -p $OUT/r
{
for v in "default" "cvd-empty" "bwrap-no-nodes" "bwrap-nodes"; do
  case $v in
    default) pre=(env);;
    cvd-empty) pre=(env CUDA_VISIBLE_DEVICES= ATTNLAB_DEVICE=cpu);;
    bwrap-no-nodes) pre=(bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid --setenv CUDA_VISIBLE_DEVICES "" --setenv ATTNLAB_DEVICE cpu --);;
    bwrap-nodes) pre=(bwrap --ro-bind / / --dev /dev $(for d in /dev/nvidia*; do echo --dev-bind $d $d; done) --proc /proc --unshare-pid --);;
  esac
  for i in 1 2; do
    /usr/bin/time -f "$v wall=%e user=%U sys=%S" "${pre[@]}" python3 -c "
import time; t=time.time(); import torch; t1=time.time(); a=torch.cuda.is_available(); t2=time.time()
from attnlab import init; rt=init(); t3=time.time()
print('$v', 'import', round(t1-t,2), 'is_available', a, round(t2-t1,2), 'init', round(t3-t2,2), rt.device)"
  done
done
} > $OUT/r/cuda_start.txt 2>&1
cat $OUT/r/cuda_start.txt
cd $ROOT/.stage/scale && SKIP_INSTALL=1 OUT=$OUT DEADLINE=${DEADLINE:-560} CLASS=32 PLAN="${PLAN}" bash benchmarks/grading_scale_gpu.sh
