#!/bin/bash
# 2-core measurement: synthetic class of 20 (no abuse cases), --jobs 1 then --jobs 2
set -u
cd /tmp/scale_m && rm -rf course && mkdir course && cd /work/wt/scale && for f in notebooks source release samples nbgrader_config.py pyproject.toml; do cp -r $f /tmp/scale_m/course/; done
cd /tmp/scale_m/course
export PATH=/work/wt/scale/.venv/bin:$PATH PYTHONUNBUFFERED=1
( while true; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done ) > /tmp/scale_m/load.txt &
LOADPID=$!
python -c "from attnlab.grading.build import generate_assignment; from attnlab.grading.course import Course; generate_assignment(Course.find())"
attnlab synthetic-class 20 --kinds reference,mistake,variant,blank > /tmp/scale_m/synthetic.txt
for j in 1 2; do
  t=$(date +%s); attnlab autograde --jobs $j --report-json /tmp/scale_m/cpu-j$j.json > /tmp/scale_m/cpu-j$j.log 2>&1
  echo "cpu-j$j: wall $(( $(date +%s) - t )) s" >> /tmp/scale_m/summary.txt
done
kill $LOADPID
python /work/wt/scale/benchmarks/compare_reports.py --expected /tmp/scale_m/synthetic.txt /tmp/scale_m/cpu-j1.json /tmp/scale_m/cpu-j2.json >> /tmp/scale_m/summary.txt 2>&1
