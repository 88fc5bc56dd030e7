#!/bin/bash
# Same hour, same VM: a class of 12 (reference, mistake, variant, blank) at --jobs 2 graded by main before
# the fork server (7946398, a git worktree) and by HEAD (kernels forked from a fork server); then a class
# of 200 at --jobs 2 by HEAD (CLASS200=1).
set -u
D=/work/main/notes/grading/2026-12-02-forkserver
for tree in /tmp/wt-7946398 /work/main; do
  name=$(git -C $tree rev-parse --short HEAD)
  OUTD=$D/class12-$name CLASS=12 JOBS=2 M=/tmp/gc-$name bash $tree/benchmarks/grading_class_cpu.sh
done
if [ -n "${CLASS200:-}" ]; then
  name=$(git -C /work/main rev-parse --short HEAD)
  OUTD=$D/class200-$name CLASS=200 JOBS=2 M=/tmp/gc200-$name bash /work/main/benchmarks/grading_class_cpu.sh
fi
