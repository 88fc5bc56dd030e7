"""Issue 34 item 1 on the H200: where the host time of one `flash_decode` call goes (fast path, the
reference kernels, B=1 H_q=32 H_kv=8 32k keys D=128 bf16): host µs per call without syncing, then
cProfile of 300 calls, top entries by own time and by cumulative time.

    PYTHONPATH=src:. python3 notes/gpu/2026-12-02/session4/c/profile_decode_host.py
"""
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_both_ways import B, D, H_KV, H_Q, T, reference_kernels  # noqa: E402

from attnlab import launch_decode  # noqa: E402
from attnlab.core import device  # noqa: E402

device.init(verbose=False)
partial, merge = reference_kernels()
q = torch.randn(B, H_Q, 1, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, H_KV, T, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
lens = torch.full((B,), T, device="cuda", dtype=torch.int32)


def call():
    return launch_decode.launch_flash_decode(partial, merge, q, k, v, lens)


for _ in range(5):
    call()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(300):
    call()
host = (time.perf_counter() - t0) / 300 * 1e6
torch.cuda.synchronize()
print(f"host time per call (no sync, GPU queue may fill): {host:.1f} us")
prof = cProfile.Profile()
prof.enable()
for _ in range(300):
    call()
prof.disable()
torch.cuda.synchronize()
st = pstats.Stats(prof)
st.sort_stats("tottime").print_stats(25)
st.sort_stats("cumulative").print_stats(40)
