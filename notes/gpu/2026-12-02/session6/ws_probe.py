"""Does warp specialization compile (and help) on sm_90 for notebook 09's kernel, causal or not, per config?

    PYTHONPATH=[triton 3.9 dir:]src python3 notes/gpu/2026-12-02/session6/ws_probe.py

Times `launch_tuned_forward(nb.attn_fwd_hopper's kernel, use_tma=True)` with and without
``warp_specialize`` at fixed configs (B=8, H=16, bf16), and SDPA's default (cuDNN) beside it.
"""
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
from notebook_cells import pick, run_module  # noqa: E402

from attnlab import bench  # noqa: E402
from attnlab.launch_tuning import launch_tuned_forward  # noqa: E402

mods = Path("/tmp/nb09_mods_ws"); mods.mkdir(exist_ok=True)
nb = run_module("nb09", pick("09_tuning_and_fp8", ("setup", "tuned-kernel")), mods)
print("triton", triton.__version__, torch.cuda.get_device_name(), flush=True)
for D, T in ((64, 4096), (128, 8192)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(8, 16, T, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    for causal in (False, True):
        flops = bench.attention_flops(8, 16, T, D, causal)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ms = bench.median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                             warmup_ms=10, rep_ms=60)
        print(f"D={D} T={T} causal={causal} cuDNN {bench.tflops(flops, ms):.0f} TFLOP/s", flush=True)
        for bm, bn, w, s in ((128, 64, 4, 2), (128, 64, 8, 2), (128, 128, 8, 2), (128, 64, 4, 3)):
            for ws in (False, True):
                cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
                try:
                    run = lambda: launch_tuned_forward(nb._attn_fwd_tuned, q, k, v, causal, use_tma=True,
                                                       warp_specialize=ws, config=cfg)
                    o, _ = run()
                    err = float((o.float() - ref.float()).abs().max())
                    ms = bench.median_ms(run, warmup_ms=10, rep_ms=60)
                    print(f"  {bm}x{bn} w{w} s{s} ws={ws!s:5} {bench.tflops(flops, ms):6.0f} TFLOP/s  max|err| {err:.3g}",
                          flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {bm}x{bn} w{w} s{s} ws={ws!s:5} {type(exc).__name__}: {str(exc).splitlines()[0][:80]}",
                          flush=True)
