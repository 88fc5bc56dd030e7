#!/bin/bash
# CPU seconds (user + sys) of a command and EVERY process it starts, kernels included:
#
#     benchmarks/cpu_seconds.sh OUT.txt COMMAND ARGS...
#
# Runs COMMAND in a fresh cgroup-v1 cpuacct group (needs root and /sys/fs/cgroup/cpuacct), so the
# sandboxed kernels that the grader kills rather than reaps are counted too: `time` (getrusage of
# children) misses them (seen 2026-12-01: 7.6 s by `time` against ~27 s read from /proc for one
# submission). Writes "wall_s user_s sys_s" to OUT.txt and exits with COMMAND's status.
set -u
out=$1; shift
cg=/sys/fs/cgroup/cpuacct/attnlab-cpu-$$
mkdir "$cg" || { echo "no cpuacct cgroup here" >&2; exit 2; }
hz=$(getconf CLK_TCK)
start=$(date +%s.%N)
( echo $BASHPID > "$cg/cgroup.procs"; exec "$@" )
rc=$?
end=$(date +%s.%N)
read -r _ user < <(grep user "$cg/cpuacct.stat")
read -r _ sys < <(grep system "$cg/cpuacct.stat")
echo "$(echo "$end - $start" | bc) $(echo "scale=2; $user / $hz" | bc) $(echo "scale=2; $sys / $hz" | bc)" > "$out"
# every process has left (the grader kills its kernels); move stragglers out before removing the group
for p in $(cat "$cg/cgroup.procs"); do echo "$p" > /sys/fs/cgroup/cpuacct/cgroup.procs; done
rmdir "$cg"
exit $rc
