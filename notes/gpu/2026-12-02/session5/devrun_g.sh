# Device call (nvidia-h200), carry .gpu/wheels .gpu/wheels-test:  bash notes/gpu/2026-12-02/session5/devrun_g.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python3 -m pytest tests/test_decoding.py tests/test_fast_path.py -q -p no:cacheprovider -rA \
  -k "large_head or cuda_graph or shared_memory or split_count" 2>&1 | grep -v '^\[gpu\]' > $OUT/tests.log; echo "exit $?" >> $OUT/tests.log
timeout 330 python3 notes/gpu/2026-12-02/session5/decode_final.py 2>&1 | grep -v '^\[gpu\]' > $OUT/decode_final.txt
tail -12 $OUT/tests.log; cat $OUT/decode_final.txt
