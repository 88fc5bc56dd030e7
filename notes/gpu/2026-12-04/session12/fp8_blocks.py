"""Issue 34 item 4: notebook 09's FA3 accuracy cell on the GPU (per-head and per-block scales, without and
with incoherent processing, float64 simulation and the given kernel), then the FP8 kernel's speed with a
scale per head and per block of 64 / 128 rows against cuDNN at B=8, H=16, D=128, causal, T = 8k / 16k,
three alternating rounds (cuDNN's own time moves between runs).

    PYTHONPATH=src:. python3 notes/gpu/2026-12-04/session12/fp8_blocks.py
"""
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
from notebook_cells import pick, run_module  # noqa: E402

from attnlab import bench  # noqa: E402

mods = Path("/tmp/nb09_fp8"); mods.mkdir(exist_ok=True)
t0 = time.perf_counter()
nb = run_module("nb09", pick("09_tuning_and_fp8", ("setup", "smem_estimate", "prune_configs", "fp8_scales", "quantize_fp8",
                                                   "fp8-error", "tuned-kernel", "autotuned", "fp8-fa3-protocol")), mods)
print(f"cells in {time.perf_counter() - t0:.1f} s; triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
run = nb.launch_tuning.launch_tuned_forward
sdpa = torch.nn.functional.scaled_dot_product_attention
B, H, D = 8, 16, 128
for T in (8192, 16384):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    flops = bench.attention_flops(B, H, T, D, True)
    fns = {"cuDNN (SDPA default)": lambda q=q, k=k, v=v: sdpa(q, k, v, is_causal=True)}
    for rows in (None, 64, 128):
        qs, ks = nb.fp8_scales(q, rows), nb.fp8_scales(k, rows)
        q8, k8 = nb.quantize_fp8(q, qs, rows), nb.quantize_fp8(k, ks, rows)
        name = "FP8, a scale per head" if rows is None else f"FP8, a scale per {rows} rows"
        fns[name] = (lambda q8=q8, k8=k8, v=v, qs=qs, ks=ks, rows=rows:
                     run(nb.attn_fwd_hopper, q8, k8, v, True, q_scale=qs, k_scale=ks, block_rows=rows, use_tma=True))
        fns[name]()  # autotune outside the timing
    times = {n: [] for n in fns}
    for _ in range(3):
        for n, fn in fns.items():
            times[n].append(bench.median_ms(fn, warmup_ms=10, rep_ms=60))
    base = sorted(times["cuDNN (SDPA default)"])[1]
    for n, ts in times.items():
        ms = sorted(ts)[1]
        print(f"T={T} {n:28s} {' '.join(f'{t:.3f}' for t in ts)} ms -> median {ms:.3f} ms "
              f"{bench.tflops(flops, ms):.0f} TFLOP/s = {base / ms:.2f}x cuDNN", flush=True)
    print(f"T={T} autotuner's configs: {nb.attn_fwd_hopper.cache}", flush=True)
    del q, k, v, fns
    torch.cuda.empty_cache()
