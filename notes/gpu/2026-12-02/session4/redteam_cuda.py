"""Issue 30's seccomp filter on a GPU host: a kernel started by bwrap and one forked by the fork server
each call keyctl (EPERM expected), then use CUDA through torch and compile and run a Triton kernel."""
import asyncio
import sys

sys.path.insert(0, ".")
from attnlab.grading import sandbox  # noqa: E402
from tests.kernel_runner import in_kernel  # noqa: E402
from tests.test_limits import KEYRINGS  # noqa: E402

CUDA = KEYRINGS + r"""
import torch, triton, triton.language as tl
x = torch.arange(1024, device="cuda", dtype=torch.float32)
print("CUDA", float((x * 2).sum()), torch.cuda.get_device_name())

@triton.jit
def _twice(X, Y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, tl.load(X + i) * 2)

y = torch.empty_like(x)
_twice[(1,)](x, y, N=1024)
print("TRITON", float(y.sum()))
"""

print("seccomp:", sandbox.describe_seccomp())
for fork in (False, True):
    out, forked, _ = asyncio.run(in_kernel(CUDA, fork_server=fork, timeout=240))
    keep = [line for line in out.splitlines() if line.startswith(("ERRNO", "TORCH", "CUDA", "TRITON"))]
    print("forked" if forked else "bwrap", keep if keep else out[-3000:])
