"""Notebook 09's FA3 accuracy cell on the GPU (the given kernel's rows), and what the rotation costs.

    PYTHONPATH=src python3 notes/gpu/2026-12-02/session6/fa3_fp8.py
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

mods = Path("/tmp/nb09_fa3"); mods.mkdir(exist_ok=True)
t0 = time.perf_counter()
nb = run_module("nb09", pick("09_tuning_and_fp8", ("setup", "smem_estimate", "prune_configs", "fp8_scales", "quantize_fp8", "fp8-error", "tuned-kernel", "autotuned",
                                                   "fp8-fa3-protocol")), mods)
print(f"cells (the FA3 cell itself ran at H=8 on the GPU above) in {time.perf_counter() - t0:.1f} s;",
      "triton", triton.__version__, torch.cuda.get_device_name(), flush=True)
# cost of incoherent processing + quantising, against the FP8 kernel, at B=8, H=16, T=8192, D=128, causal
B, H, T, D = 8, 16, 8192, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
rot = nb.hadamard_rotation(D).to("cuda", torch.bfloat16)
flops = bench.attention_flops(B, H, T, D, True)
run = nb.launch_tuning.launch_tuned_forward
qs, ks = nb.fp8_scales(q), nb.fp8_scales(k)
q8, k8 = nb.quantize_fp8(q, qs), nb.quantize_fp8(k, ks)
ms_kernel = bench.median_ms(lambda: run(nb.attn_fwd_hopper, q8, k8, v, True, q_scale=qs, k_scale=ks, use_tma=True),
                            warmup_ms=10, rep_ms=60)
ms_cudnn = bench.median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                           warmup_ms=10, rep_ms=60)
ms_rot = bench.median_ms(lambda: (q @ rot, k @ rot), warmup_ms=10, rep_ms=60)
ms_quant = bench.median_ms(lambda: (nb.quantize_fp8(q, nb.fp8_scales(q)), nb.quantize_fp8(k, nb.fp8_scales(k))),
                           warmup_ms=10, rep_ms=60)
print(f"B={B} H={H} T={T} D={D} causal: FP8 kernel {ms_kernel:.3f} ms ({bench.tflops(flops, ms_kernel):.0f} TFLOP/s, "
      f"{ms_cudnn / ms_kernel:.2f}x cuDNN {ms_cudnn:.3f} ms); rotating Q and K (bf16 matmuls) {ms_rot:.3f} ms; "
      f"the notebook's quantising in PyTorch {ms_quant:.3f} ms", flush=True)
