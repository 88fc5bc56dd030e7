#!/bin/bash
# A class of 200 synthetic submissions (no abuse cases) graded on this 2-core machine at --jobs 2, after
# the fifth session's cuts (06's measurement sections and the widgets' figures skipped under the grader);
# CPU seconds of the whole process tree (benchmarks/cpu_seconds.sh), /proc/loadavg sampled every 30 s.
# The machine's speed that day is recorded with it: `import torch` timed five times before the run.
# The package is a copy of src/ taken at the start (PYTHONPATH), so edits to the working tree during the
# run do not reach its kernels.
set -u
R=/work/main; M=/tmp/class200b; OUTD=${OUTD:-$R/notes/grading/2026-12-01/class200-after}
rm -rf $M && mkdir -p $M/course && cd $R && for f in notebooks source release samples nbgrader_config.py pyproject.toml; do cp -r $f $M/course/; done
cp -r $R/src $M/src && echo "commit $(git -C $R rev-parse --short HEAD)" > $OUTD/summary.txt
cd $M/course
export PATH=$R/.venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPATH=$M/src
for i in 1 2 3 4 5; do /usr/bin/time -f "import torch: %e s wall, %U s user" python -c "import torch" 2>> $OUTD/summary.txt; done
( while true; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done ) > $OUTD/load.txt &
LOADPID=$!
python -c "from attnlab.grading.build import generate_assignment; from attnlab.grading.course import Course; generate_assignment(Course.find())"
attnlab synthetic-class 200 --kinds reference,mistake,variant,blank > $OUTD/synthetic.txt
echo "j2: start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUTD/summary.txt
$R/benchmarks/cpu_seconds.sh $OUTD/j2.cpu attnlab autograde --jobs 2 --report-json $M/j2.json > $M/j2.log 2>&1
read -r wall user sys < $OUTD/j2.cpu
echo "j2: wall $wall s, CPU $user user + $sys sys; per submission: $(echo "scale=1; $wall / 200" | bc) s wall, $(echo "scale=2; ($user + $sys) / 200" | bc) CPU s; end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUTD/summary.txt
kill $LOADPID
python $R/benchmarks/compare_reports.py --expected $OUTD/synthetic.txt $M/j2.json >> $OUTD/summary.txt 2>&1
tail -3 $M/j2.log >> $OUTD/summary.txt
gzip -c $M/j2.json > $OUTD/j2.json.gz
