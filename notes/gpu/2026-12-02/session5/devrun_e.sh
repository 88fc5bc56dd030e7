# Device call (nvidia-h200), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap:
#   bash notes/gpu/2026-12-02/session5/devrun_e.sh
# Branch `integrate` (the five branches of session 4 with their failures fixed) on the H200:
# decode at head dims 256 and 512 (issue 34 item 2), every given launcher replayed from a CUDA graph
# (issue 34 item 1), the output flood graded sandboxed (issue 30: the false timeout seen in session 4).
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/env.txt 2>&1
timeout 200 python3 -m pytest tests/test_decoding.py tests/test_fast_path.py -q -p no:cacheprovider -rA \
  -k "large_head or cuda_graph or shared_memory" > $OUT/decode_graph.log 2>&1; echo "exit $?" >> $OUT/decode_graph.log
timeout 300 python3 -m pytest tests/test_limits.py -q -p no:cacheprovider -k "flood" > $OUT/flood.log 2>&1
echo "exit $?" >> $OUT/flood.log
cat $OUT/env.txt; tail -15 $OUT/decode_graph.log; tail -6 $OUT/flood.log
