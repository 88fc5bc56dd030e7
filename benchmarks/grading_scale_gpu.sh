#!/usr/bin/env bash
# Class-sized grading on one GPU host: a synthetic class graded with --jobs 16, 1, 8, 4 (GPU cases
# included) and on 2 cores without the GPU (taskset, CUDA_VISIBLE_DEVICES=""), then a comparison of
# every grade across the runs. Run from the course root (the device tool: stage the worktree at
# .stage/scale, carry .stage/scale .gpu/wheels .gpu/wheels-grade .gpu/bwrap):
#   cd .stage/scale && OUT=... bash benchmarks/grading_scale_gpu.sh
# KINDS=reference (say) makes every synthetic student of one kind, for a --jobs scan with one submission
# per worker. SHARD=I/N grades that shard of the class (attnlab autograde --shard) in each PLAN step: a class too
# large for one device call is measured as its shards, one call each, on the same kind of host.
# Each step is skipped when less time is left than it needs (DEADLINE seconds from the start);
# everything it wrote is in $OUT/grading.tar.gz after each step, the summary in $OUT/summary.txt.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-515}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out}; R=$OUT/r; mkdir -p "$R"
ROOT=$(cd ../.. && pwd)
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
pack() { tar -czf "$OUT/grading.tar.gz" -C "$OUT" r 2>/dev/null; }
if [ -z "${SKIP_INSTALL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.gpu/wheels/*.whl "$ROOT"/.gpu/wheels-grade/*.whl 2>&1 | tail -2
  export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
{ date -u; uname -r; nproc; free -g | head -2; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
  ls /dev | grep -c '^nvidia[0-9]'; $PY -c "import sys, torch, triton, nbgrader, nbclient, sqlalchemy
print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'nbgrader', nbgrader.__version__,
      'nbclient', nbclient.__version__, 'sqlalchemy', sqlalchemy.__version__, 'cuda', torch.cuda.is_available())";
  bwrap --version; } > "$R/env.txt" 2>&1
cat "$R/env.txt" >> "$S"
UNSAFE=""
$PY -c "from attnlab.grading.sandbox import check; ok, d = check(); print('sandbox:', ok, d); raise SystemExit(0 if ok else 1)" \
  >> "$S" 2>&1 || { [ -n "${REQUIRE_SANDBOX:-}" ] && { say "REQUIRE_SANDBOX is set and the sandbox does not work: stopping"; pack; exit 1; }; UNSAFE="--unsafe-no-sandbox"; }
say "unsafe flag: '${UNSAFE}'  setup done at $(( $(date +%s) - T0 )) s"
if [ -n "${SAMPLES_JOBS:-}" ]; then  # `make grade` on this host: build, the sample submissions of both assignments
  t=$(date +%s)
  $PY -m attnlab.tools.command grade-samples --jobs "$SAMPLES_JOBS" $UNSAFE > "$R/grade-samples.log" 2>&1
  say "grade-samples --jobs $SAMPLES_JOBS: rc=$? wall=$(( $(date +%s) - t ))s"
  grep -E "^(student|reference|blank|typical_mistakes|==) " "$R/grade-samples.log" | tee -a "$S"
  pack
fi
$PY -c "from attnlab.grading.host.build import generate_assignment; from attnlab.grading.course import Course
generate_assignment(Course.find())" > "$R/generate.log" 2>&1 || { say "generate_assignment failed"; tail -20 "$R/generate.log" >> "$S"; pack; exit 1; }
$PY -m attnlab.tools.command synthetic-class ${CLASS:-24} --kinds ${KINDS:-reference,mistake,variant,blank} > "$R/synthetic.txt" 2>&1
STUDENTS=($(ls submitted | sort))
# name jobs n_students estimate_s [prefix...]
grade() {
  local name=$1 jobs=$2 n=$3 need=$4; shift 4
  if [ "$(left)" -lt "$need" ]; then say "$name: skipped ($(left) s left, needs ~$need)"; return; fi
  local args=(); for s in "${STUDENTS[@]:0:$n}"; do args+=(--student "$s"); done
  [ -n "${SHARD:-}" ] && args=(--shard "$SHARD")  # SHARD=I/N: that shard of the whole class instead
  local t=$(date +%s)
  timeout $(( $(left) + 5 )) "$@" $PY -m attnlab.tools.command autograde --jobs "$jobs" "${args[@]}" $UNSAFE \
    --report-json "$R/$name.json" > "$R/$name.log" 2>&1
  local rc=$? wall=$(( $(date +%s) - t ))
  [ -n "${SHARD:-}" ] && n=$(python3 -c "import json; print(len({r['student'] for r in json.load(open('$R/$name.json'))}))")
  say "$name: jobs=$jobs submissions=$n${SHARD:+ (shard $SHARD)} rc=$rc wall=${wall}s per-submission=$(python3 -c "print(round($wall/max($n, 1), 1))") | $(grep -E '^graded ' "$R/$name.log")"
  say "  plan: $(grep -m1 -E 'worker' "$R/$name.log")"
  pack
}
# evidence that the kernels ran on the GPUs: per-GPU memory every 2 s, and the notebooks' own device line
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader -l 2 > "$R/gpu_use.csv" 2>/dev/null &
SMI=$!
if [ -n "${PLAN:-}" ]; then  # PLAN="name:jobs:submissions:need_s ..." (e.g. the 2-GPU host)
  RUNS=(); CPU=()
  for spec in $PLAN; do IFS=: read -r name jobs n need <<< "$spec"; grade "$name" "$jobs" "$n" "$need"; RUNS+=("$R/$name.json"); done
elif [ -n "${SMOKE:-}" ]; then  # a check of this script on any machine: two submissions, two workers
  grade smoke-j2 2 2 0; grade smoke-j1 1 1 0 env CUDA_VISIBLE_DEVICES= taskset -c 0
  RUNS=("$R"/smoke-j2.json "$R"/smoke-j1.json); CPU=()
else
  grade gpu-j16 16 16 150
  grade gpu-j1 1 1 90
  grade gpu-j8 8 8 100
  grade gpu-j4 4 4 90
  grade cpu2-j2 2 4 70 env CUDA_VISIBLE_DEVICES= taskset -c 0,1
  RUNS=("$R"/gpu-j1.json "$R"/gpu-j4.json "$R"/gpu-j8.json "$R"/gpu-j16.json); CPU=("$R"/cpu2-j2.json)
fi
kill $SMI 2>/dev/null
say "GPUs that held memory during the runs (index: max MiB): $(awk -F', ' '{split($2,a," "); if (a[1]>m[$1]) m[$1]=a[1]} END {for (i in m) printf "%s: %s  ", i, m[i]}' "$R/gpu_use.csv")"
say "autograded 05 notebooks that ran on a GPU: $(grep -l 'GPU: NVIDIA' autograded/*/attention_kernels/05_triton_flash.ipynb 2>/dev/null | wc -l) of $(ls autograded/*/attention_kernels/05_triton_flash.ipynb 2>/dev/null | wc -l)"
have() { for f in "$@"; do [ -s "$f" ] && echo "$f"; done; }
say "== GPU runs against each other and the expected totals"
$PY benchmarks/compare_reports.py --expected "$R/synthetic.txt" $(have "${RUNS[@]}") 2>&1 | tee -a "$S"
if [ -n "$(have "${CPU[@]}")" ]; then
  say "== the CPU-only run against the expected totals"
  $PY benchmarks/compare_reports.py --expected "$R/synthetic.txt" $(have "${CPU[@]}") 2>&1 | tee -a "$S"
fi
say "total $(( $(date +%s) - T0 )) s"
pack
