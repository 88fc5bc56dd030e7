"""GPU figures for notes/: the reference Triton kernels of notebooks 04 and 05 against PyTorch.

    python benchmarks/kernels.py SOURCE_DIR OUT.json

Loads ``_softmax_kernel`` and ``triton_flash_attention`` from the source (instructor) notebooks in
SOURCE_DIR, checks them against float64 references at the timed sizes, and times them with
``triton.testing.do_bench`` medians on random inputs. Prints a table and writes every figure to
OUT.json with the device, versions and date.
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
from pathlib import Path

import torch
import triton

from attnlab import bench, sweep
from attnlab.launch import launch_softmax, run_softmax_kernel
from attnlab.nbload import load_notebook_module


def versions() -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()}


def softmax_figures(kernel) -> list[dict]:
    rows = []
    for n_cols in (1024, 2048, 4096, 8192):
        n_rows = (1 << 28) // n_cols  # 1 GiB of float32 in, 1 GiB out
        x = torch.randn(n_rows, n_cols, device="cuda")
        y = launch_softmax(kernel, x)
        err = ((y.double() - torch.softmax(x.double(), -1)).norm() / torch.softmax(x.double(), -1).norm()).item()
        moved = 2 * x.numel() * 4
        # the kernel alone (output allocated once), and through the launcher (which also fills
        # every new output with NaN: one more full write)
        ours = bench.gb_per_s(moved, bench.median_ms(lambda: run_softmax_kernel(kernel, x, y)))
        launcher = bench.gb_per_s(moved, bench.median_ms(lambda: launch_softmax(kernel, x)))
        ref = bench.gb_per_s(moved, bench.median_ms(lambda: torch.softmax(x, -1)))
        rows.append(dict(n_cols=n_cols, n_rows=n_rows, yours_gbs=ours, yours_via_launcher_gbs=launcher,
                         torch_gbs=ref, rel_err=err))
        del x, y
    return rows


def flash_figures(flash) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for D, T in ((64, 2048), (64, 8192), (128, 2048), (128, 8192)):
        B, H = 8, 16
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = bench.attention_flops(B, H, T, D, causal=True)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        row = dict(B=B, H=H, T=T, D=D, causal=True, dtype="bfloat16",
                   sdpa_default_backend=bench.sdpa_backend(q, k, v, True))
        configs = {"yours_default": dict(block_m=64, block_n=64, num_warps=4, num_stages=2),
                   "yours_128x64_w8_s3": dict(block_m=128, block_n=64, num_warps=8, num_stages=3),
                   "yours_128x64_w4_s3": dict(block_m=128, block_n=64, num_warps=4, num_stages=3),
                   "yours_128x128_w8_s2": dict(block_m=128, block_n=128, num_warps=8, num_stages=2)}
        for name, cfg in configs.items():
            try:
                o, _ = flash(q, k, v, causal=True, **cfg)
                row[name + "_rel_err"] = ((o.float() - ref).norm() / ref.norm()).item()
                row[name] = bench.tflops(flops, bench.median_ms(lambda: flash(q, k, v, causal=True, **cfg)))
            except Exception as exc:  # e.g. out of shared memory for a large config
                row[name] = f"error: {type(exc).__name__}: {str(exc)[:100]}"
        row["sdpa_default"] = bench.tflops(flops, bench.median_ms(lambda: sweep.sdpa(q, k, v, True)))
        for label, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    row[label] = bench.tflops(flops, bench.median_ms(lambda: sweep.sdpa(q, k, v, True)))
            except Exception as exc:
                row[label] = f"error: {type(exc).__name__}"
        rows.append(row)
        del q, k, v, ref
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str]) -> int:
    source, out = Path(argv[0]), Path(argv[1])
    nb04 = load_notebook_module(source / "04_triton_softmax.ipynb", required=("_softmax_kernel",),
                                  cells=("bootstrap", "setup", "_softmax_kernel"))
    nb05 = load_notebook_module(source / "05_triton_flash.ipynb", required=("triton_flash_attention",),
                                cells=("bootstrap", "setup", "_flash_fwd_kernel", "triton_flash_attention"))
    result = {"versions": versions(),
              "copy_gbs": bench.copy_bandwidth_gbs(),
              "matmul_bf16_tflops": bench.matmul_tflops(8192)}
    result["softmax_fp32"] = softmax_figures(nb04._softmax_kernel)
    result["flash_causal_bf16"] = flash_figures(nb05.triton_flash_attention)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["versions"]))
    print(f"copy {result['copy_gbs']:.0f} GB/s, bf16 matmul {result['matmul_bf16_tflops']:.0f} TFLOP/s")
    for r in result["softmax_fp32"]:
        print(f"softmax fp32 {r['n_cols']:5d} cols: yours {r['yours_gbs']:6.0f} GB/s "
              f"(via launcher {r['yours_via_launcher_gbs']:6.0f}), torch {r['torch_gbs']:6.0f} GB/s, "
              f"rel err {r['rel_err']:.1e}")
    for r in result["flash_causal_bf16"]:
        cells = " ".join(f"{k}={v:.0f}" if isinstance(v, float) and not k.endswith("err") else f"{k}={v}"
                         for k, v in r.items() if k.startswith(("yours", "sdpa")))
        print(f"flash T={r['T']} D={r['D']}: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
