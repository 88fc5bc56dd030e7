"""Notebook 09's GPU figures: autotune winners, the Hopper steps, SDPA's backends, FP8 vs bf16.

    python benchmarks/tuning_gpu.py OUT_DIR [BUDGET_S] [--checks] [--warp-spec] [--shapes 64x4096,128x8192]

Takes the given kernel and the model solutions (pruning, FP8 quantisation) from notebooks/09's cells
(``benchmarks/notebook_cells.py``). For causal bf16 attention, B = 8, H = 16, it times (medians of
``triton.testing.do_bench``): SDPA's default (cuDNN on the H200), SDPA's FlashAttention-2 backend, the
kernel with one fixed config, autotuned, + TMA descriptors, + a persistent grid, and FP8 QKᵀ (D = 128).
Every config is compiled first, in parallel processes sharing Triton's on-disk cache, so the autotuner
only times (compiling ~90 configs one after another takes minutes). Writes ``tuning_results.csv`` after
every shape and ``tuning_env.json``; starts no new shape after BUDGET_S seconds (default 330).
``--checks`` also writes the correctness checks against float64, each config's estimated vs compiled
shared memory (``tuning_smem.csv``) and the FP8 error (``tuning_error.json``): run 1 of 2026-11-30.
``--warp-spec`` also times ``tl.range(..., warp_specialize=True)`` (it does not compile with triton 3.6 on
sm_90); ``--shapes`` measures only the listed D x T pairs (default: all of ``SHAPES``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from notebook_cells import pick, run_module  # noqa: E402

NB = "09_tuning_and_fp8"
CELLS = ("setup", "fp8_scales", "quantize_fp8", "smem_estimate", "prune_configs", "tuned-kernel", "autotuned")
#: every (D, T) of the per-T table: the issue's goals first (D = 64 at T >= 4096, D = 128 at T >= 8192)
SHAPES = ((64, 4096), (128, 8192), (64, 16384), (128, 16384), (64, 8192), (128, 4096), (64, 2048), (128, 2048),
          (64, 1024), (128, 1024))
B, H, N_PROGRAMS = 8, 16, 132


def _load(mods: Path):
    return run_module("nb09", pick(NB, CELLS), mods)


def _compile_jobs(head_dims):
    """(D, fp8, flags, config) for every kernel the measurement launches (causal)."""
    from attnlab import launch_tuning

    jobs = []
    for D in head_dims:
        for cfg in launch_tuning.CONFIG_SPACE:
            jobs.append((D, False, dict(USE_TMA=False, PERSISTENT=False), cfg))
        for cfg in launch_tuning.HOPPER_SPACE:
            jobs.append((D, False, dict(USE_TMA=True, PERSISTENT=False), cfg))
            jobs.append((D, False, dict(USE_TMA=True, PERSISTENT=True), cfg))
            if D == 128:
                jobs.append((D, True, dict(USE_TMA=True, PERSISTENT=False), cfg))
    return jobs


def _compile(args):
    """Worker: compile one config into Triton's on-disk cache (same argument types and specialisations
    as the measured launches: BH = 128, n_programs = 132, T a multiple of 16)."""
    mods, (D, fp8, flags, (bm, bn, w, s)) = args
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("nbcells_nb09", Path(mods) / "nbcells_nb09.py")
    nb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nb)
    qk_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    q = torch.empty(1, 1, 256, D, device="cuda", dtype=qk_dtype)
    v = torch.empty(1, 1, 256, D, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(256, device="cuda")
    one = torch.ones(1, device="cuda")
    if 4096 % bm or 4096 % bn or bm % bn or nb.smem_estimate(bm, bn, s, D, q.element_size()) > 232448:
        return "pruned"
    try:
        nb._attn_fwd_tuned.warmup(q, q, v, v, lse, one, one, 4096, B * H, N_PROGRAMS, 0.1, CAUSAL=True, HEAD_DIM=D,
                                  BLOCK_M=bm, BLOCK_N=bn, WARP_SPEC=False, **flags, num_warps=w, num_stages=s,
                                  grid=(1,))
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:100]}"


def main(out: Path, budget_s: float, checks: bool, warp_spec: bool = False, shapes=SHAPES) -> None:
    import multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    mods = Path("/tmp/nb09_mods")  # outside OUT_DIR: only results come back
    mods.mkdir(exist_ok=True)
    nb = _load(mods)

    from attnlab import bench_tuning

    env = bench_tuning.environment()
    env["command"] = " ".join(["python3"] + sys.argv)
    env["shape"] = dict(B=B, H=H, causal=True, dtype="bfloat16")
    (out / "tuning_env.json").write_text(json.dumps(env, indent=1))
    print(env, flush=True)

    jobs = _compile_jobs(sorted({d for d, _ in shapes}))
    with ProcessPoolExecutor(max_workers=min(15, os.cpu_count() or 4), mp_context=mp.get_context("spawn")) as pool:
        results = list(pool.map(_compile, [(str(mods), j) for j in jobs]))
    bad = [(j, r) for j, r in zip(jobs, results) if r not in ("ok", "pruned")]
    print(f"compiled {results.count('ok')} configs ({results.count('pruned')} pruned) in "
          f"{time.perf_counter() - start:.0f} s; failures: {bad[:3]}", flush=True)

    # the notebook's own autotuners (cell "autotuned": do_bench 5 ms warm-up, 25 ms repetitions)
    if checks:
        for row in bench_tuning.check_variants(nb, T=512, D=64) + bench_tuning.check_variants(nb, T=512, D=128):
            print("check", row, flush=True)
    rows = []
    for D, T in shapes:
        if time.perf_counter() - start > budget_s:
            print(f"budget reached: skipping D={D} T={T}", flush=True)
            continue
        t0 = time.perf_counter()
        new = bench_tuning.measure_shape(nb, B=B, H=H, T=T, D=D, causal=True, fp8=(D == 128),
                                         skip=() if warp_spec else ("+ warp spec.",))
        for r in new:
            print(bench_tuning.format_row(r), flush=True)
        print(f"[D={D} T={T}: {time.perf_counter() - t0:.1f} s]", flush=True)
        rows += new
        bench_tuning.write_csv(sorted(rows, key=lambda r: (r.D, r.T)), out / "tuning_results.csv")
    if checks:
        smem_rows = bench_tuning.smem_table(nb, D=64) + bench_tuning.smem_table(nb, D=128)
        bench_tuning.write_smem_csv(smem_rows, out / "tuning_smem.csv")
        (out / "tuning_error.json").write_text(json.dumps(bench_tuning.fp8_error(nb, T=8192, D=128), indent=1))
    print(f"total {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("budget_s", type=float, nargs="?", default=330.0)
    ap.add_argument("--checks", action="store_true")
    ap.add_argument("--warp-spec", action="store_true")
    ap.add_argument("--shapes", type=lambda s: tuple(tuple(int(x) for x in p.split("x")) for p in s.split(",")),
                    default=SHAPES, help="D x T pairs, e.g. 64x4096,128x8192")
    a = ap.parse_args()
    main(a.out, a.budget_s, a.checks, a.warp_spec, a.shapes)
