# Device call (nvidia-h200; pure cgroup v2 in a container), carry .gpu/wheels .gpu/wheels-test .gpu/bwrap:
#   bash notes/gpu/2026-12-02/limits/devrun.sh
# The limits of issue 30 item 4 on a pure cgroup v2 host: where the kernels' cgroups go, memory counted as
# a whole (memfd, children), the scratch tmpfs, hidden cgroups, oom_score_adj; then a forked kernel uses CUDA.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .gpu/wheels/*.whl .gpu/wheels-test/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT
{
  echo "== host"; uname -r; cat /proc/self/cgroup; ls /sys/fs/cgroup | head -40
  echo "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"; echo "subtree: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
  grep Cap /proc/self/status; cat /proc/self/oom_score_adj
  python3 -c "from attnlab.grading import tasks, sandbox; print(sandbox.check()); print(tasks.describe()); print(tasks.describe_memory()); tasks.prepare(); tasks.describe.cache_clear(); tasks.describe_memory.cache_clear(); print('after prepare:', tasks.describe(), tasks.describe_memory()); print(open('/proc/self/cgroup').read())"
} > $OUT/host.txt 2>&1
# prepare() above may have moved this shell's processes into the leaf; the tests run as autograde would
timeout 400 python3 -c "from attnlab.grading import tasks; tasks.prepare(); import pytest, sys; sys.exit(pytest.main(['tests/test_limits.py', '-q', '-p', 'no:cacheprovider', '-rA']))" > $OUT/test_limits.txt 2>&1
echo "exit $?" >> $OUT/test_limits.txt
timeout 120 python3 - > $OUT/cuda.txt 2>&1 <<'PY'
import asyncio, sys
sys.path.insert(0, ".")
from attnlab.grading import tasks
tasks.prepare()
from tests.kernel_runner import in_kernel
CODE = ("import torch, os; x = torch.ones(1024, device='cuda'); print('CUDA', float(x.sum()), "
        "open('/proc/self/oom_score_adj').read().strip(), os.listdir('/sys/fs/cgroup'))")
async def cg(km):
    return [str(c) for c in km.cgroups], [(c / 'memory.max').read_text().strip() for c in km.cgroups if (c / 'memory.max').exists()]
for fork in (True, False):
    print(fork, asyncio.run(in_kernel(CODE, fork_server=fork, after=cg, timeout=90)))
PY
echo "exit $?" >> $OUT/cuda.txt
cat $OUT/host.txt $OUT/test_limits.txt $OUT/cuda.txt | tail -120
