#!/bin/bash
# A class of 200 synthetic submissions (no abuse cases) graded on this 2-core machine at --jobs 2, after
# the fifth session's cuts (06's measurement sections and the widgets' figures skipped under the grader).
# Ran from /work/main at fefd63a (the same steps, then written out in this file; now in the benchmark).
cd "$(dirname "$0")/../../../.." && OUTD=notes/grading/2026-12-01/class200-after M=/tmp/class200b CLASS=200 JOBS=2 \
  bash benchmarks/grading_class_cpu.sh
