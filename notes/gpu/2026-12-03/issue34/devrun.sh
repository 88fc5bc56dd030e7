# Issue 34's figures re-measured side by side on one H200, one warm machine, two consecutive device calls
# (carry .gpu/wheels; repository root):
#   PART=1 bash notes/gpu/2026-12-03/issue34/devrun.sh   # decode (notebook 08's grid, flash_decode both ways,
#                                                         # D=256/512) and FA3's FP8 accuracy test
#   PART=2 bash notes/gpu/2026-12-03/issue34/devrun.sh   # notebook 09's tuned forward and FP8 against cuDNN,
#                                                         # notebook 07's backward against cuDNN / FA2
set -u
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version(), 'cuda', torch.version.cuda)"
  git log -1 --format='tree %H %s' 2>/dev/null; } > $OUT/env.txt
cat $OUT/env.txt
if [ "${PART:-1}" = 1 ]; then
  OUT=$OUT timeout 300 python3 notes/gpu/2026-12-02/session5/decode_final.py 2>&1 | grep -v '^\[gpu\]' > $OUT/decode_final.txt
  echo "decode rc $?"; tail -12 $OUT/decode_final.txt
  timeout 150 python3 notes/gpu/2026-12-02/session6/fa3_fp8.py > $OUT/fa3_fp8.log 2>&1
  echo "fa3 rc $?"; grep -v "Warning\|warn(" $OUT/fa3_fp8.log | tail -20
else
  timeout 200 python3 benchmarks/tuning_gpu.py "$OUT/t36" ${BUDGET:-110} --shapes 64x1024,64x4096,64x16384,128x1024,128x8192,128x16384 \
    > $OUT/tuning.log 2>&1
  echo "tuning rc $?"; grep -v "^check\|^smem\|^{" $OUT/tuning.log | tail -30
  ATTNLAB_BWD_TS=4096,8192,16384 ATTNLAB_BWD_CAUSAL_ONLY=1 timeout 300 python3 benchmarks/backward.py source/attention_kernels_beyond/07_triton_backward.ipynb "$OUT/bwd" > $OUT/backward.log 2>&1
  echo "backward rc $?"; tail -30 $OUT/backward.log
fi
