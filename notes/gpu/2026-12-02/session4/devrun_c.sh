# Device call C (nvidia-h200), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap:
#   bash notes/gpu/2026-12-02/session4/devrun_c.sh
# Issue 34 item 1 (launchers' fast path) and issue 33 (cost per submission, ranking, leaderboard):
#  (a) each given launcher captured in a CUDA graph, replayed on new inputs, checked against PyTorch
#      (tests/test_fast_path.py, the GPU-only test);
#  (b) flash_decode from Python (before: checking mode = the old behaviour; after: fast path) and from a
#      CUDA graph, against SDPA both ways (c/decode_both_ways.py);
#  (c) the timing stage's wall time per submission, before (a worker per notebook, 30 reps) and after
#      (one worker per student, 10 reps) (c/cost.py);
#  (d) 07 and 08 ranked: 6 + 4 honest variants, stage vs CUDA events (benchmarks/timing_ranking.py),
#      and their leaderboard HTML (c/leaderboard_of_ranking.py).
# Each part under its own timeout (450 s in all at most); logs in $OUT whatever happens. About 5 minutes.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
C=notes/gpu/2026-12-02/session4/c
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version)" >> $OUT/device.txt
git log --oneline -1 >> $OUT/device.txt 2>/dev/null
T0=$(date +%s)
timeout 100 python3 -m pytest tests/test_fast_path.py -q -p no:cacheprovider -rA -k cuda_graph > $OUT/a_graphs.txt 2>&1
echo "exit $? after $(( $(date +%s) - T0 )) s" >> $OUT/a_graphs.txt
timeout 60 python3 $C/decode_both_ways.py --reps 100 --json $OUT/b_decode.json > $OUT/b_decode.txt 2>&1
echo "exit $? after $(( $(date +%s) - T0 )) s" >> $OUT/b_decode.txt
timeout 100 python3 $C/cost.py --json $OUT/c_cost.json > $OUT/c_cost.txt 2>&1
echo "exit $? after $(( $(date +%s) - T0 )) s" >> $OUT/c_cost.txt
timeout 160 python3 benchmarks/timing_ranking.py --notebooks 07 08 --reruns 2 --events-reps 50 --out /tmp/tr > $OUT/d_ranking.log 2>&1
echo "exit $? after $(( $(date +%s) - T0 )) s" >> $OUT/d_ranking.log
cp /tmp/tr/summary.txt $OUT/d_summary.txt 2>/dev/null; cp /tmp/tr/timing_ranking.json $OUT/d_timing_ranking.json 2>/dev/null
timeout 30 python3 $C/leaderboard_of_ranking.py /tmp/tr/timing_ranking.json $OUT/leaderboard > $OUT/d_leaderboard.txt 2>&1
echo "exit $?" >> $OUT/d_leaderboard.txt
cat $OUT/device.txt
echo "== (a) graphs"; grep -E "PASSED|FAILED|ERROR|passed|failed|exit" $OUT/a_graphs.txt | tail -12
echo "== (b) decode"; tail -9 $OUT/b_decode.txt
echo "== (c) cost"; grep -E "sandbox|before|after|exit|Error" $OUT/c_cost.txt | cut -c1-400
echo "== (d) ranking"; cat $OUT/d_summary.txt 2>/dev/null || tail -15 $OUT/d_ranking.log
tail -2 $OUT/d_ranking.log; cat $OUT/d_leaderboard.txt; ls $OUT/leaderboard 2>/dev/null
