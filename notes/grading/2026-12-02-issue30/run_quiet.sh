#!/bin/bash
# Issue 30's cost goal on a quiet machine (fifth session): the same class of 12 graded by 35248d2 (main
# before issue 30's work; a detached worktree at /tmp/wt-35248d2 with today's benchmark scripts copied in and
# /work/main/.venv linked) and by main, one after the other, with nothing else running.
set -u
D=/work/main/notes/grading/2026-12-02-issue30
for tree in /tmp/wt-35248d2 /work/main; do
  name=$(git -C $tree rev-parse --short HEAD)
  OUTD=$D/quiet-class12-$name CLASS=12 JOBS=2 M=/tmp/gc-$name bash $tree/benchmarks/grading_class_cpu.sh
done
