# Device call (nvidia-h200), from a copy of the committed tree at .stage/scale; carry .stage/scale .gpu/wheels .gpu/bwrap:
#   cd .stage/scale && CHECK="04 05 08" CLASS=48 DEADLINE=560 PLAN="gpu-j16:16:48:200" bash notes/gpu/2026-12-01/grading-4/devrun5.sh
# 1. the source notebooks named in CHECK, executed with their hidden GPU tests (model solutions must pass);
# 2. benchmarks/grading_scale_gpu.sh with PLAN (sandboxed grading of a synthetic class).
set -u
ROOT=$(cd ../.. && pwd)
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.gpu/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT/r $OUT/check
python3 -c "from attnlab.grading.bytecode import compile_kernel_imports as c; print('byte-compiled:', c())" > $OUT/r/bytecode.txt 2>&1
for nn in ${CHECK:-}; do
  nb=$(ls source/attention_kernels*/"$nn"_*.ipynb)
  t=$SECONDS
  timeout 200 python3 benchmarks/execute_notebooks.py /tmp/nb "$nb" >> $OUT/check/notebooks.log 2>&1
  echo "$nn: exit $? in $(( SECONDS - t )) s" | tee -a $OUT/check/summary.txt
done
SKIP_INSTALL=1 OUT=$OUT DEADLINE=$(( ${DEADLINE:-560} - (SECONDS - T0) )) CLASS=${CLASS:-48} PLAN="${PLAN}" bash benchmarks/grading_scale_gpu.sh
