#!/bin/bash
# A synthetic class graded on this (CPU) machine, the CPU-host counterpart of grading_scale_gpu.sh:
#
#     OUTD=notes/grading/DATE/NAME [CLASS=200] [JOBS=2] [KINDS=reference,mistake,variant,blank] \
#         bash benchmarks/grading_class_cpu.sh
#
# Grades `attnlab synthetic-class $CLASS --kinds $KINDS` with `attnlab autograde --jobs $JOBS` in a copy
# of the course at $M (default /tmp/grading-class), measuring the CPU seconds of the whole process tree
# (cpu_seconds.sh: needs root and cgroup-v1 cpuacct) and sampling /proc/loadavg every 30 s. A shared
# development machine's speed varies from hour to hour, so `import torch` is timed five times first and
# written beside the figures. The package is copied too (PYTHONPATH), so edits to the working tree
# during the run do not reach its kernels. Writes summary.txt, load.txt, synthetic.txt, j$JOBS.cpu and
# j$JOBS.json.gz to $OUTD; every total is compared with what synthetic-class printed.
set -u
R=$(cd "$(dirname "$0")/.." && pwd)
: "${OUTD:?set OUTD to the folder for the results}"
CLASS=${CLASS:-200} JOBS=${JOBS:-2} KINDS=${KINDS:-reference,mistake,variant,blank} M=${M:-/tmp/grading-class}
mkdir -p "$OUTD" && OUTD=$(cd "$OUTD" && pwd)
rm -rf $M && mkdir -p $M/course && cd $R && for f in notebooks source release samples nbgrader_config.py pyproject.toml; do cp -r $f $M/course/; done
cp -r $R/src $M/src && echo "commit $(git -C $R rev-parse --short HEAD)" > $OUTD/summary.txt
cd $M/course
export PATH=$R/.venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPATH=$M/src
for i in 1 2 3 4 5; do /usr/bin/time -f "import torch: %e s wall, %U s user" python -c "import torch" 2>> $OUTD/summary.txt; done
( while true; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done ) > $OUTD/load.txt &
LOADPID=$!
python -c "from attnlab.grading.host.build import generate_assignment; from attnlab.grading.course import Course; generate_assignment(Course.find())"
attnlab synthetic-class $CLASS --kinds $KINDS > $OUTD/synthetic.txt
echo "j$JOBS: start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUTD/summary.txt
$R/benchmarks/cpu_seconds.sh $OUTD/j$JOBS.cpu attnlab autograde --jobs $JOBS --report-json $M/j$JOBS.json > $M/j$JOBS.log 2>&1
read -r wall user sys < $OUTD/j$JOBS.cpu
echo "j$JOBS: wall $wall s, CPU $user user + $sys sys; per submission: $(echo "scale=1; $wall / $CLASS" | bc) s wall, $(echo "scale=2; ($user + $sys) / $CLASS" | bc) CPU s; end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUTD/summary.txt
kill $LOADPID
python $R/benchmarks/compare_reports.py --expected $OUTD/synthetic.txt $M/j$JOBS.json >> $OUTD/summary.txt 2>&1
tail -3 $M/j$JOBS.log >> $OUTD/summary.txt
gzip -c $M/j$JOBS.json > $OUTD/j$JOBS.json.gz
