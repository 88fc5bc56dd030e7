#!/bin/bash
# Issue 30's cost goal (grading time per submission on 2 cores within 20% of the tree before it): a class of 12
# (reference, mistake, variant, blank) at --jobs 2 graded by 35248d2 (main before issue 30's work) and by main,
# alternating, the same hour. The old tree is a git worktree with today's grading_class_cpu.sh,
# cpu_seconds.sh and compare_reports.py copied in. Both use /work/main/.venv.
set -u
D=/work/main/notes/grading/2026-12-02-issue30
for round in 1 2; do
  for tree in /tmp/wt-35248d2 /work/main; do
    name=$(git -C $tree rev-parse --short HEAD)
    OUTD=$D/class12-$name-r$round CLASS=12 JOBS=2 M=/tmp/gc-$name bash $tree/benchmarks/grading_class_cpu.sh
  done
done
