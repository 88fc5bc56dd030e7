#!/bin/bash
# Same hour, same VM: a class of 12 (reference, mistake, variant, blank) at --jobs 2 graded by three trees:
# 69ff367 (10.4 s per submission for a class of 200 on the morning of 2026-12-01), aeeb66c (main at the start
# of 2026-12-02) and HEAD (kernel accounts, interpreter patched once per launch). Old trees are git worktrees
# with today's benchmarks/grading_class_cpu.sh, cpu_seconds.sh and compare_reports.py copied in.
set -u
D=/work/main/notes/grading/2026-12-02
for tree in /tmp/wt-69ff367 /tmp/wt-aeeb66c /work/main; do
  name=$(git -C $tree rev-parse --short HEAD)
  OUTD=$D/class12-$name CLASS=12 JOBS=2 M=/tmp/gc-$name bash $tree/benchmarks/grading_class_cpu.sh
done
