"""GPU figures of notebook 07: the reference Triton backward against SDPA (cuDNN and FlashAttention-2).

    python benchmarks/backward.py SOURCE_07.ipynb OUT_DIR
    ATTNLAB_BWD_SEARCH=wide ATTNLAB_BWD_TUNE_ONLY=1 python benchmarks/backward.py ...  # a wider tile search only
    ATTNLAB_BWD_TS=4096,16384 ATTNLAB_BWD_CAUSAL_ONLY=1 python benchmarks/backward.py ...  # fewer points

Loads the reference backward kernels from the instructor notebook 07 and, for the forward, notebook
05's reference ``_flash_fwd_kernel`` from the instructor notebook source/attention_kernels/05_triton_flash.ipynb
(instructor-side only: 07's release gives learners PyTorch's FlashAttention forward instead),
checks them against SDPA in bf16 at every timed size, picks the backward tile configuration at
T = 4096 (causal, per head dim) from a short list, then times, for D = 64 and 128, causal and not,
T = 1k ... 16k in bf16 with B*H*T = 2^20 tokens (every point far past launch overhead):

- backward alone: the three kernels into buffers allocated once; SDPA: autograd.grad of a retained graph;
- forward + backward: ``attention_function`` with 05's reference forward kernel and this backward,
  through the launchers, against SDPA forward + backward.

TFLOP/s use the standard count: forward 4·B·H·T²·D, backward 2.5x that, halved when causal.
Writes OUT_DIR/backward.json (every figure, device, versions), backward.csv and backward.png.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch
import triton

from attnlab import bench, launch, launch_backward
from attnlab.nbload import load_notebook_module

TOKENS = 1 << 20            # B * H * T at every point
H = 16
TS = tuple(int(t) for t in os.environ.get("ATTNLAB_BWD_TS", "1024,2048,4096,8192,16384").split(","))  # a subset: quicker
CAUSAL = (True,) if os.environ.get("ATTNLAB_BWD_CAUSAL_ONLY") else (False, True)
DS = (64, 128)
#: (block_m, block_n, num_warps, num_stages) tried for the backward at T=4096, causal
CANDIDATES = ((64, 64, 4, 2), (32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 3))
#: a wider search (``ATTNLAB_BWD_SEARCH=wide``), 2026-12-02: more stages and warps, 128-row tiles
WIDE = CANDIDATES + ((32, 64, 4, 2), (32, 128, 8, 3), (64, 64, 4, 3), (64, 64, 8, 3), (64, 128, 8, 2),
                     (64, 128, 4, 3), (128, 64, 8, 2), (128, 128, 8, 2), (32, 128, 4, 4), (64, 128, 8, 4))
#: the forward's configuration (notebook 05's measurements: best at 128/64 for D=64, 128/128 for D=128)
FWD = launch_backward.FORWARD_CONFIGS
#: notebook 05's reference forward kernel, in the instructor notebook (never shipped to learners)
NB05 = Path(__file__).resolve().parents[1] / "source" / "attention_kernels" / "05_triton_flash.ipynb"


def versions() -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()}


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def inputs(T, D, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    B = TOKENS // (H * T)
    return [torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]


def sdpa_times(q, k, v, do, causal, backend):
    """(backward ms, forward+backward ms, grads) of SDPA with ``backend`` (None: its default choice)."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    import contextlib

    ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with ctx:
        o = sdpa(q, k, v, is_causal=causal)
        grads = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        bwd = bench.median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
        fwdbwd = bench.median_ms(lambda: torch.autograd.grad(sdpa(q, k, v, is_causal=causal), (q, k, v), do))
    return bwd, fwdbwd, grads


def main(argv) -> int:
    from torch.nn.attention import SDPBackend

    nb_path, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    nb = load_notebook_module(nb_path, required=("_bwd_dkdv_kernel",),
                              cells=("bootstrap", "setup", "_bwd_preprocess_kernel",
                                     "_bwd_dkdv_kernel", "_bwd_dq_kernel", "triton_flash_attention_backward"))
    fwd_kernel = load_notebook_module(NB05, required=("_flash_fwd_kernel",),
                                      cells=("bootstrap", "setup", "_flash_fwd_kernel"))._flash_fwd_kernel
    kernels = launch_backward.BackwardKernels(nb._bwd_preprocess_kernel, nb._bwd_dkdv_kernel, nb._bwd_dq_kernel)
    info = versions()
    print(info, flush=True)

    def forward(q, k, v, causal, D):
        bm, bn, w, s = FWD[D]
        return launch.launch_flash_forward(fwd_kernel, q, k, v, causal=causal, block_m=bm, block_n=bn,
                                           num_warps=w, num_stages=s)

    def our_bwd_ms(q, k, v, o, lse, do, causal, cfg):
        bm, bn, w, s = cfg
        bufs = launch_backward.backward_buffers(q, bm, bn)
        run = lambda: launch_backward.run_backward_kernels(kernels, q, k, v, o, lse, do, *bufs, causal=causal,  # noqa: E731
                                                           block_m=bm, block_n=bn, num_warps=w, num_stages=s)
        run()
        return bench.median_ms(run)

    # 1. pick the backward configuration per head dim at T=4096, causal
    best = {}
    tuning = []
    for D in DS:
        q, k, v, do = inputs(4096, D)
        o, lse = forward(q, k, v, True, D)
        flops = 2.5 * bench.attention_flops(q.shape[0], H, 4096, D, causal=True)
        for cfg in WIDE if os.environ.get("ATTNLAB_BWD_SEARCH") == "wide" else CANDIDATES:
            try:
                ms = our_bwd_ms(q, k, v, o, lse, do, True, cfg)
            except Exception as exc:  # out of shared memory or registers for this tile shape
                print(f"D={D} cfg={cfg}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                continue
            tuning.append(dict(D=D, cfg=cfg, ms=ms, tflops=bench.tflops(flops, ms)))
            print(f"tune D={D} block_m,block_n,warps,stages={cfg}: {ms:.3f} ms {bench.tflops(flops, ms):.1f} TFLOP/s",
                  flush=True)
        best[D] = max((t for t in tuning if t["D"] == D), key=lambda t: t["tflops"])["cfg"]
        del q, k, v, do, o, lse

    if os.environ.get("ATTNLAB_BWD_TUNE_ONLY"):
        (out / "backward_tuning.json").write_text(json.dumps({"versions": info, "tuning": tuning, "best": best},
                                                             indent=1))
        return 0
    # 2. the sweep
    rows = []
    for D in DS:
        cfg = best[D]
        attn = launch_backward.attention_function(lambda: kernels, fwd_kernel=lambda: fwd_kernel,
                                                  forward=FWD[D], backward=cfg)
        for causal in CAUSAL:
            for T in TS:
                q, k, v, do = inputs(T, D, seed=T)
                B = q.shape[0]
                fwd_flops = bench.attention_flops(B, H, T, D, causal=causal)
                o, lse = forward(q, k, v, causal, D)
                ours = launch_backward.launch_flash_backward(kernels, q, k, v, o, lse, do, causal=causal,
                                                             block_m=cfg[0], block_n=cfg[1], num_warps=cfg[2],
                                                             num_stages=cfg[3])
                bwd = our_bwd_ms(q, k, v, o, lse, do, causal, cfg)
                qa, ka, va = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
                fwdbwd = bench.median_ms(lambda: torch.autograd.grad(attn(qa, ka, va, causal), (qa, ka, va), do))
                cud_b, cud_fb, ref = sdpa_times(q, k, v, do, causal, None)
                fa2_b, fa2_fb, _ = sdpa_times(q, k, v, do, causal, SDPBackend.FLASH_ATTENTION)
                row = dict(D=D, causal=causal, T=T, B=B, H=H, cfg=cfg, sdpa_default=bench.sdpa_backend(q, k, v, causal),
                           err_dq=rel(ours[0], ref[0]), err_dk=rel(ours[1], ref[1]), err_dv=rel(ours[2], ref[2]))
                for name, ms, flops in (("ours_bwd", bwd, 2.5 * fwd_flops), ("ours_fwdbwd", fwdbwd, 3.5 * fwd_flops),
                                        ("cudnn_bwd", cud_b, 2.5 * fwd_flops), ("cudnn_fwdbwd", cud_fb, 3.5 * fwd_flops),
                                        ("fa2_bwd", fa2_b, 2.5 * fwd_flops), ("fa2_fwdbwd", fa2_fb, 3.5 * fwd_flops)):
                    row[name + "_ms"] = ms
                    row[name + "_tflops"] = bench.tflops(flops, ms)
                rows.append(row)
                print(f"D={D} causal={causal!s:5} T={T:>5} B={B:>3}: bwd ours {row['ours_bwd_tflops']:6.1f} "
                      f"cuDNN {row['cudnn_bwd_tflops']:6.1f} FA2 {row['fa2_bwd_tflops']:6.1f} | fwd+bwd ours "
                      f"{row['ours_fwdbwd_tflops']:6.1f} cuDNN {row['cudnn_fwdbwd_tflops']:6.1f} FA2 "
                      f"{row['fa2_fwdbwd_tflops']:6.1f} TFLOP/s | rel err vs SDPA dq {row['err_dq']:.1e} "
                      f"dk {row['err_dk']:.1e} dv {row['err_dv']:.1e} [{row['sdpa_default']}]", flush=True)
                del q, k, v, do, o, lse, ours, ref, qa, ka, va
                torch.cuda.empty_cache()

    (out / "backward.json").write_text(json.dumps({"versions": info, "tuning": tuning, "best": best, "rows": rows},
                                                  indent=1))
    with open(out / "backward.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, out / "backward.png", info)
    return 0


def plot(rows, path, info) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 8), sharex=True)
    styles = (("ours", "reference Triton kernels", "C0"), ("cudnn", "SDPA default (cuDNN)", "C1"),
              ("fa2", "SDPA FlashAttention-2", "C2"))
    for col, (D, causal) in enumerate(((64, False), (64, True), (128, False), (128, True))):
        sel = sorted((r for r in rows if r["D"] == D and r["causal"] == causal), key=lambda r: r["T"])
        for row_i, what in enumerate(("bwd", "fwdbwd")):
            ax = axes[row_i][col]
            for key, label, color in styles:
                ax.plot([r["T"] for r in sel], [r[f"{key}_{what}_tflops"] for r in sel], "o-", label=label, color=color)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{'backward' if what == 'bwd' else 'forward + backward'}, D={D}, "
                         f"{'causal' if causal else 'not causal'}", fontsize=10)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s (bwd = 2.5x fwd FLOPs)")
            if row_i == 1:
                ax.set_xlabel("T (B*H*T = 2^20 tokens, bf16)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"FlashAttention backward on {info['device']}: torch {info['torch']}, triton {info['triton']}, "
                 f"cuDNN {info['cudnn']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
