# Issue 34's figures side by side on one warm H200, two consecutive device calls (carry .gpu/wheels):
#   PART=1 bash notes/gpu/2026-12-04/session12/devrun2.sh   # GPU tests of the new code; decode (notebook 08's
#                                                            # grid, flash_decode both ways, D=256/512);
#                                                            # FP8: FA3's accuracy test and speed with block scales
#   PART=2 bash notes/gpu/2026-12-04/session12/devrun2.sh   # notebook 09's tuned forward and FP8 against cuDNN,
#                                                            # notebook 07's backward against cuDNN / FA2
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version(), 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
if [ "${PART:-1}" = 1 ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_fp8_kernel.py tests/test_decoding.py tests/test_fast_path.py \
    -k "fp8 or default_split or large_head or cuda_graph or compile_only" > $OUT/gpu_tests.log 2>&1
  echo "gpu tests: rc=$? after $(( $(date +%s) - T0 )) s"; tail -4 $OUT/gpu_tests.log
  OUT=$OUT timeout 260 python3 notes/gpu/2026-12-04/session12/decode_final.py > $OUT/decode_final.txt 2>&1
  echo "decode_final: rc=$? after $(( $(date +%s) - T0 )) s"; grep -v "^\[gpu\]" $OUT/decode_final.txt | tail -16
  timeout 150 python3 notes/gpu/2026-12-04/session12/fp8_blocks.py > $OUT/fp8_blocks.txt 2>&1
  echo "fp8_blocks: rc=$? after $(( $(date +%s) - T0 )) s"; grep -v "Warning\|warn(\|autotuner's configs" $OUT/fp8_blocks.txt | tail -26
else
  timeout 200 python3 benchmarks/tuning_gpu.py "$OUT/t36" ${BUDGET:-90} --shapes 64x1024,64x4096,64x16384,128x1024,128x8192,128x16384 \
    > $OUT/tuning.log 2>&1
  echo "tuning: rc=$? after $(( $(date +%s) - T0 )) s"; grep -v "^check\|^smem\|^{" $OUT/tuning.log | tail -30
  ATTNLAB_BWD_TS=4096,8192,16384 ATTNLAB_BWD_CAUSAL_ONLY=1 timeout 300 python3 benchmarks/backward.py \
    source/attention_kernels_beyond/07_triton_backward.ipynb "$OUT/bwd" > $OUT/backward.log 2>&1
  echo "backward: rc=$? after $(( $(date +%s) - T0 )) s"; tail -30 $OUT/backward.log
fi
