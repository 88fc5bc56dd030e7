"""GPU figures of notebook 08 (split-K decoding), in one run: correctness, tuning, the sweep, the plot.

    python benchmarks/decode_gpu.py OUT_DIR [--quick]

From the repository root, with ``PYTHONPATH=src``; needs only torch, triton and matplotlib (no
jupytext, no nbgrader: the notebooks' percent-format sources are parsed here). Steps:

1. every code cell of ``notebooks/08_flash_decoding.py`` runs in order with the model solution (the
   hidden tests' GPU cases included: bf16/fp16, D = 128, ragged caches of thousands of keys), then
   the test cells again for each correct variant of ``samples/mistakes/08_flash_decoding.py``;
2. tuning at B = 1, H_q = 32, H_kv = 8 and 32, T_k = 32k, bf16: BLOCK_N, warps, stages, split count;
3. the sweep with the best configuration: B = 1 and 8, H_kv = 8 and 32, T_k = 4k ... 128k, against
   notebook 05's kernel at T_q = 1 and SDPA at T_q = 1, and the copy bandwidth;
4. OUT_DIR/decode.png, decode_results.csv, decode_tuning.csv, decode_summary.json, decode_cells.log.

Every step is timed launched from Python and replayed from a CUDA graph (:mod:`attnlab.bench_decode`).
``--quick`` (a run of a minute or so, beside an execution of the notebook itself, which covers step 1):
no step 1, no tuning (the configuration chosen by the full run: block_n 64, 4 warps, 4 stages), B = 1,
T_k = 8k ... 128k.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import importlib.util
import io
import json
import platform
import re
import sys
import tempfile
import time
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from attnlab import bench, bench_decode, launch_decode, init

ROOT = Path(__file__).resolve().parents[1]
START = time.time()


def log(*a):
    print(f"[{time.time() - START:6.1f}s]", *a, flush=True)


def percent_cells(path: Path) -> list[tuple[dict, str]]:
    """(nbgrader metadata, source) of every code cell of a jupytext percent-format file."""
    cells, meta, lines, kind = [], None, [], None
    for line in path.read_text().splitlines() + ["# %% END"]:
        if line.startswith("# %%"):
            if kind == "code":
                cells.append((meta or {}, "\n".join(lines).strip("\n")))
            kind = "markdown" if "[markdown]" in line else "code"
            m = re.search(r"nbgrader=(\{.*\})", line)
            meta = json.loads(m.group(1)) if m else {}
            lines = []
        else:
            lines.append(line)
    return cells


def load_cells_as_module(sources: list[str], name: str) -> types.ModuleType:
    """Triton reads a kernel's source with inspect: write the cells to a real file and import it."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text("\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_notebook_cells(edits_cell=None, edits=(), skip=("bench-decode", "fwd-kernel-05")) -> dict:
    """Run 08's code cells in order in one module (hidden tests included); {grade_id: error} of test cells."""
    cells = percent_cells(ROOT / "notebooks" / "08_flash_decoding.py")
    sources, tests = [], []
    for meta, src in cells:
        gid = meta.get("grade_id")
        if gid in skip:
            continue
        if gid == edits_cell:
            for old, new in edits:
                assert src.count(old) == 1, (gid, old)
                src = src.replace(old, new)
        if meta.get("grade") and gid.startswith("test_"):
            tests.append((gid, src))
        else:
            sources.append(src)
    mod = load_cells_as_module(sources, f"nb08_{abs(hash(edits)) % 10**6}")
    failed = {}
    for gid, src in tests:
        t0 = time.time()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(src, f"<{gid}>", "exec"), vars(mod))
            log(f"  PASS {gid} ({time.time() - t0:.1f} s)")
        except Exception as exc:  # noqa: BLE001
            failed[gid] = f"{type(exc).__name__}: {exc}"
            log(f"  FAIL {gid}: {failed[gid][:400]}")
    return failed


def correct_variants():
    """The mistakes file's entries with no failing tests (correct kernels written differently)."""
    @dataclass(frozen=True)
    class Mistake:
        id: str
        notebook: str
        cell: str
        edits: tuple
        fails: tuple
        why: str

    fake = types.ModuleType("attnlab.grading.samples")
    fake.Mistake = Mistake
    sys.modules.setdefault("attnlab.grading.samples", fake)
    spec = importlib.util.spec_from_file_location("m08", ROOT / "samples" / "mistakes" / "08_flash_decoding.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [m for m in mod.MISTAKES if not m.fails]


def versions() -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "sms": torch.cuda.get_device_properties(0).multi_processor_count,
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()}


def sdpa_backend_gqa(q, k, v) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])
        torch.cuda.synchronize()
    return " | ".join(sorted({e.key for e in prof.key_averages()}))[:300]


#: The kernel configuration the full run of 2026-11-30 chose (notes/gpu-measurements.md), for --quick.
CHOSEN = dict(block_n=64, num_warps=4, num_stages=4)


def main(out: Path, quick: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    init()
    info = versions()
    log(info)
    summary: dict = {"versions": info, "command": "PYTHONPATH=src python benchmarks/decode_gpu.py OUT_DIR"
                                                  + (" --quick" if quick else "")}
    try:
        stages(out, info, summary, quick)
    finally:  # whatever ran is reported, even when a later stage fails
        (out / "decode_summary.json").write_text(json.dumps(summary, indent=1, default=str))


def stages(out: Path, info: dict, summary: dict, quick: bool) -> None:
    # 1. correctness on the GPU: the notebook's tests (hidden GPU cases included), then the correct variants
    if not quick:
        log("notebook 08 test cells, model solution:")
        summary["cells_reference"] = run_notebook_cells()
        summary["cells_variants"] = {}
        for m in correct_variants():
            log(f"notebook 08 test cells, correct variant {m.id}:")
            summary["cells_variants"][m.id] = run_notebook_cells(m.cell, m.edits)

    kernels = load_cells_as_module(
        [src for meta, src in percent_cells(ROOT / "notebooks" / "08_flash_decoding.py")
         if meta.get("grade_id") in ("setup", "_decode_partial_kernel", "_decode_merge_kernel")], "k08")
    fwd05 = load_cells_as_module(
        [src for meta, src in percent_cells(ROOT / "notebooks" / "05_triton_flash.py")
         if meta.get("grade_id") in ("setup", "_flash_fwd_kernel")], "k05")._flash_fwd_kernel
    P, M = kernels._decode_partial_kernel, kernels._decode_merge_kernel

    # the 05 kernel's one-query step and split-K agree with SDPA
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 32, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(2, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    lens = torch.full((2,), 4096, device="cuda", dtype=torch.int32)
    step, _ = bench_decode.splitk_step(P, M, q, k, v, lens)
    step05, _ = bench_decode.fwd05_step(fwd05, q, k, v)
    summary["max_abs_err_vs_fp32_sdpa"] = {"split-K": (step()[0].float() - ref).abs().max().item(),
                                           "05 kernel": (step05()[0].float() - ref).abs().max().item()}
    # the same step captured in a CUDA graph and replayed into a poisoned output computes the same
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_graph, _ = step()
    o_graph.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    summary["max_abs_err_vs_fp32_sdpa"]["split-K, CUDA graph replay"] = (o_graph.float() - ref).abs().max().item()
    if not quick:
        summary["sdpa_kernels_gqa"] = sdpa_backend_gqa(q, k, v)
        summary["sdpa_kernels_mha"] = sdpa_backend_gqa(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
    log("errors vs fp32 SDPA:", summary["max_abs_err_vs_fp32_sdpa"], "SDPA kernels:", summary.get("sdpa_kernels_gqa"))
    del q, k, v, ref, step, step05, graph, o_graph

    copy_gbs = bench.copy_bandwidth_gbs()
    summary["copy_gbs"] = copy_gbs
    log(f"copy bandwidth (read + write): {copy_gbs:.0f} GB/s")

    if quick:
        summary["kernel_config"] = CHOSEN
        sweep(P, M, fwd05, CHOSEN, out, info, summary, copy_gbs, batches=(1,),
              lengths=(8192, 16384, 32768, 65536, 131072))
        return
    # 2. tuning at T_k = 32k, B = 1
    tuning = []
    best = {}
    for H_kv in (8, 32):
        q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, H_kv, 32768, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        lens = torch.full((1,), 32768, device="cuda", dtype=torch.int32)
        auto = launch_decode.decode_config(q, k).num_splits
        for block_n in (64, 128):
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    for splits in sorted({auto, 16, 32, 64, 128}):
                        if time.time() - START > 170:
                            break
                        opts = dict(num_splits=splits, block_n=block_n, num_warps=warps, num_stages=stages)
                        try:
                            step, config = bench_decode.splitk_step(P, M, q, k, v, lens, **opts)
                            pt = bench_decode.time_point("split-K", step, config, 1, 32, H_kv, 32768, 128)
                        except Exception as exc:  # noqa: BLE001
                            pt = bench_decode.DecodePoint("split-K", 1, 32, H_kv, 32768, 128,
                                                          status=f"error: {exc}"[:200], config=str(opts))
                        tuning.append(dict(H_kv=H_kv, auto_splits=auto, **opts, ms=pt.ms, gbs=pt.gbs,
                                           status=pt.status))
        ok = [t for t in tuning if t["H_kv"] == H_kv and t["status"] == "ok"]
        for t in sorted(ok, key=lambda t: t["ms"])[:5]:
            log(f"  H_kv={H_kv} best: {t}")
        best[H_kv] = min(ok, key=lambda t: t["ms"])
        del q, k, v
    with open(out / "decode_tuning.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(tuning[0]))
        w.writeheader()
        w.writerows(tuning)
    # one kernel configuration for the launcher: the best sum of (time / best time) over both shapes;
    # the split count stays the launcher's own rule
    def score(cfg):
        tot = 0.0
        for H_kv in (8, 32):
            rows = [t for t in tuning if t["H_kv"] == H_kv and t["status"] == "ok" and t["num_splits"] == t["auto_splits"]
                    and (t["block_n"], t["num_warps"], t["num_stages"]) == cfg]
            if not rows:
                return float("inf")
            tot += rows[0]["ms"] / best[H_kv]["ms"]
        return tot
    cfgs = {(t["block_n"], t["num_warps"], t["num_stages"]) for t in tuning}
    chosen = min(cfgs, key=score)
    summary["tuning_best"] = best
    summary["chosen_kernel_config_auto_splits"] = dict(block_n=chosen[0], num_warps=chosen[1], num_stages=chosen[2],
                                                      score=score(chosen))
    log("chosen (auto splits):", summary["chosen_kernel_config_auto_splits"])

    # 3. the sweep
    sweep(P, M, fwd05, dict(block_n=chosen[0], num_warps=chosen[1], num_stages=chosen[2]), out, info, summary,
          copy_gbs)
    t_nb = time.time()
    bench_decode.decode_sweep(P, M, fwd05, lengths=(4096, 32768, 131072), log=lambda *a: None)
    summary["notebook_cell_sweep_s"] = time.time() - t_nb
    log(f"the notebook's own sweep took {summary['notebook_cell_sweep_s']:.1f} s")
    log("done")


def sweep(P, M, fwd05, opts: dict, out: Path, info: dict, summary: dict, copy_gbs: float, **shape) -> None:
    """The sweep (plain and CUDA-graph timings) into decode_results.csv, decode.png and the log's table."""
    points = bench_decode.decode_sweep(P, M, fwd05, splitk_options=opts, log=log, **shape)
    bench_decode.write_csv(points, out / "decode_results.csv")
    log("table (us and GB/s of K and V read, launched from Python; then replayed from a CUDA graph):\n"
        + bench_decode.format_table(points, copy_gbs))
    summary["sweep_points"] = len(points)
    try:
        bench_decode.plot_decode(points, copy_gbs, path=out / "decode.png",
                                 title=f"one decoding step, bf16, {info['device']}, torch {info['torch']}, "
                                       f"triton {info['triton']} ({info['date'][:10]})")
    except Exception as exc:  # noqa: BLE001 (the CSV holds every figure; the plot can be redrawn from it)
        log(f"plot failed: {exc}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="/tmp/decode_out", type=Path)
    parser.add_argument("--quick", action="store_true", help="no notebook cells, no tuning; B = 1, T_k = 8k..128k")
    args = parser.parse_args()
    try:
        main(args.out_dir, args.quick)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
