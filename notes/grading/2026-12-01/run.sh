#!/bin/bash
# 2-core measurement after the speed fixes: synthetic class of 20 (no abuse cases), --jobs 1 then --jobs 2,
# each run's CPU seconds (user + sys of the whole process tree, kernels included) from a cpuacct cgroup
# (benchmarks/cpu_seconds.sh), /proc/loadavg sampled every 15 s.
set -u
WT=/work/wt/speed
M=/tmp/speed_m20
rm -rf $M && mkdir -p $M/course && cd $WT && for f in notebooks source release samples nbgrader_config.py pyproject.toml; do cp -r $f $M/course/; done
cd $M/course
export PATH=$WT/.venv/bin:$PATH PYTHONUNBUFFERED=1
( while true; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 15; done ) > $M/load.txt &
LOADPID=$!
python -c "from attnlab.grading.build import generate_assignment; from attnlab.grading.course import Course; generate_assignment(Course.find())"
attnlab synthetic-class 20 --kinds reference,mistake,variant,blank > $M/synthetic.txt
for j in 1 2; do
  echo "cpu-j$j: start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $M/summary.txt
  $WT/benchmarks/cpu_seconds.sh $M/cpu-j$j.cpu attnlab autograde --jobs $j --report-json $M/cpu-j$j.json > $M/cpu-j$j.log 2>&1
  read -r wall user sys < $M/cpu-j$j.cpu
  echo "cpu-j$j: wall $wall s, CPU $user user + $sys sys; per submission: $(echo "scale=1; $wall / 20" | bc) s wall, $(echo "scale=2; ($user + $sys) / 20" | bc) CPU s; end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $M/summary.txt
done
kill $LOADPID
python $WT/benchmarks/compare_reports.py --expected $M/synthetic.txt $M/cpu-j1.json $M/cpu-j2.json /work/wt/speed/notes/grading/2026-11-30/cpu-j1.json >> $M/summary.txt 2>&1
