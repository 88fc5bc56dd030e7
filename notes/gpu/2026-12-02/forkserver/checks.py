"""Device check of the fork server (2026-12-02): a kernel forked from it, as a root grader's kernel
account, uses CUDA and compiles and runs a Triton kernel on the GPU, as a kernel bwrap starts does.
Run from the staged tree: python3 notes/gpu/2026-12-02/forkserver/checks.py"""
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from attnlab.grading import sandbox  # noqa: E402
from tests.kernel_runner import in_kernel  # noqa: E402

SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def rowmax_kernel(X, Y, N_TILES: tl.constexpr, BLOCK: tl.constexpr):
    best = tl.full((), float("-inf"), tl.float32)
    for t in range(N_TILES):
        best = tl.maximum(best, tl.max(tl.load(X + t * BLOCK + tl.arange(0, BLOCK)), 0))
    tl.store(Y, best)
'''
PROBE = f'''
import json, os, sys, torch
open("rowmax.py", "w").write({SOURCE!r})
sys.path.insert(0, os.getcwd())
from rowmax import rowmax_kernel
x = torch.randn(96, device="cuda")
y = torch.empty(1, device="cuda")
rowmax_kernel[(1,)](x, y, N_TILES=6, BLOCK=16)
print(json.dumps({{"uid": os.getuid(), "pid": os.getpid(), "ppid": os.getppid(), "gpu": torch.cuda.get_device_name(),
                  "triton_ok": bool(y.item() == x.max().item()),
                  "nodes": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))}}))
'''
print("sandbox.check():", sandbox.check())
for fork_server in (True, True, False):
    t = time.monotonic()
    out, forked, _ = asyncio.run(in_kernel(PROBE, fork_server=fork_server))
    print(f"fork_server={fork_server} forked={forked} wall={time.monotonic() - t:.1f}s", out.strip()[-600:])
