"""Does the timing stage rank kernels in the order of their real speed, and repeat itself? (issue 33)

Writes variant submissions of notebooks 04, 05 and 07 (the reference kernel edited into honest but
slower kernels: no causal skipping, one masked loop, two passes over K, one key per iteration
without ``tl.dot``, the output read back), times each with :func:`attnlab.grading.timing.time_notebook`
(a fresh process per submission, the reference timed beside it), times the reference submission
``--reruns`` times for the ratio's spread, and measures each variant's launcher call independently
in this process by CUDA events (:func:`events_ms`): the stage's ranking must match that order.

Run on a GPU host, from the repository root:
    python benchmarks/timing_ranking.py --notebooks 04 05 07 --reruns 5 --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnlab.grading import timing  # noqa: E402

_SRC = {"08": ROOT / "source/attention_kernels_beyond/08_flash_decoding.ipynb",
        "04": ROOT / "source/attention_kernels/04_triton_softmax.ipynb",
        "05": ROOT / "source/attention_kernels/05_triton_flash.ipynb",
        "07": ROOT / "source/attention_kernels_beyond/07_triton_backward.ipynb"}

_PROLOGUE_05 = '''    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_j = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < T
    Q += bh * stride_bh
    K += bh * stride_bh
    V += bh * stride_bh
    O += bh * stride_bh
    LSE += bh * T
    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    hi = T
    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, T)
'''
_PER_KEY_05 = _PROLOGUE_05 + '''    qf = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for j in range(0, hi):
        k = tl.load(K + j * stride_t + offs_d).to(tl.float32)
        v = tl.load(V + j * stride_t + offs_d).to(tl.float32)
        s = tl.sum(qf * k[None, :], axis=1) * scale
        if CAUSAL:
            s = tl.where(j <= offs_m, s, float("-inf"))
        m_new = tl.maximum(m_i, s)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use)
        l_i = l_i * alpha + p
        acc = acc * alpha[:, None] + p[:, None] * v[None, :]
        m_i = m_new
    tl.store(O + offs_m[:, None] * stride_t + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + offs_m, m_i + tl.log(l_i), mask=row_ok)
'''
_TWO_PASS_05 = _PROLOGUE_05 + '''    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + offs_j
        k = tl.load(K + offs_n[:, None] * stride_t + offs_d[None, :], mask=(offs_n < T)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        visible = (offs_n < T)[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        m_i = tl.maximum(m_i, tl.max(tl.where(visible, s, float("-inf")), axis=1))
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + offs_j
        kv = offs_n[:, None] * stride_t + offs_d[None, :]
        k = tl.load(K + kv, mask=(offs_n < T)[:, None], other=0.0)
        v = tl.load(V + kv, mask=(offs_n < T)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        visible = (offs_n < T)[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        p = tl.exp(tl.where(visible, s, float("-inf")) - m_use[:, None])
        l_i += tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc)
    tl.store(O + offs_m[:, None] * stride_t + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + offs_m, m_use + tl.log(l_i), mask=row_ok)
'''


def _body(new_body: str):
    def edit(src: str) -> str:
        start = src.index("### BEGIN SOLUTION\n") + len("### BEGIN SOLUTION\n")
        return src[:start] + new_body + "    " + src[src.index("### END SOLUTION"):]
    return edit


def _replace(*pairs):
    def edit(src: str) -> str:
        for old, new in pairs:
            assert old in src, old
            src = src.replace(old, new)
        return src
    return edit


#: notebook -> [(variant, cell, edit)]: honest kernels (right numbers), slower than the reference.
VARIANTS = {
    "04": [("reference", None, None),
           ("output-read-back", "_softmax_kernel", _replace((
               "    y = num / tl.sum(num, axis=0)\n    tl.store(output_ptr + row * output_row_stride + cols, "
               "y.to(output_ptr.dtype.element_ty), mask=in_row)",
               "    out = output_ptr + row * output_row_stride + cols\n"
               "    tl.store(out, num.to(output_ptr.dtype.element_ty), mask=in_row)\n"
               "    y = tl.load(out, mask=in_row, other=0.0).to(tl.float32) / tl.sum(num, axis=0)\n"
               "    tl.store(out, y.to(output_ptr.dtype.element_ty), mask=in_row)")))],
    "05": [("reference", None, None),
           ("one-masked-loop", "_flash_fwd_kernel", _replace(
               ("lo = (start_m // BLOCK_N) * BLOCK_N", "lo = 0"), ("lo = (T // BLOCK_N) * BLOCK_N", "lo = 0"))),
           ("no-causal-skip", "_flash_fwd_kernel", _replace(("hi = tl.minimum(start_m + BLOCK_M, T)", "hi = T"))),
           ("no-skip-one-loop", "_flash_fwd_kernel", _replace(
               ("lo = (start_m // BLOCK_N) * BLOCK_N", "lo = 0"), ("lo = (T // BLOCK_N) * BLOCK_N", "lo = 0"),
               ("hi = tl.minimum(start_m + BLOCK_M, T)", "hi = T"))),
           ("two-passes-over-K", "_flash_fwd_kernel", _body(_TWO_PASS_05)),
           ("one-key-per-iteration", "_flash_fwd_kernel", _body(_PER_KEY_05))],
    "07": [("reference", None, None),
           ("dq-no-causal-skip", "_bwd_dq_kernel", _replace(("hi = tl.minimum(start_m + BLOCK_M, T)", "hi = T"))),
           ("dkdv-no-causal-skip", "_bwd_dkdv_kernel", _replace(("lo = (start_n // BLOCK_M) * BLOCK_M", "lo = 0")))],
    "08": [("reference", None, None)],
}


def write_variant(nb: str, name: str, cell: str | None, edit, folder: Path) -> Path:
    data = json.loads(_SRC[nb].read_text())
    if cell is not None:
        c = next(c for c in data["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == cell)
        c["source"] = edit("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
    path = folder / name / _SRC[nb].name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def events_ms(nb: str, path: Path, reps: int = 50) -> float:
    """The variant's launcher call timed here by another method than the stage's: CUDA events around
    the call, the GPU kept busy (``torch.cuda._sleep``) while the launcher's Python runs, so the events
    span the GPU's work only; median of ``reps`` on fixed inputs, L2 flushed each time."""
    import importlib.util

    import torch

    bench = timing.BENCHMARKS[_SRC[nb].stem]
    src = timing.kernel_source(timing.cells_of(path, bench.cells))
    file = path.parent / "kernels_direct.py"
    file.write_text(src.text)
    spec = importlib.util.spec_from_file_location(f"direct_{path.parent.name}_{nb}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make, run, expected, work, tol = timing._harness(bench.notebook, dict(bench.shape),
                                                     tuple(getattr(module, c) for c in bench.cells), "cuda",
                                                     getattr(torch, bench.shape.get("dtype", "float32")))
    inputs = make(torch.Generator(device="cuda").manual_seed(0))
    flush = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    run(*inputs)  # compile
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda._sleep(40_000_000)  # ~20 ms of GPU spin: covers the launcher's Python
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notebooks", nargs="+", default=["04", "05", "07"])
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("timing_ranking"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "variants"
    rows = []
    for nb in args.notebooks:
        for name, cell, edit in VARIANTS[nb]:
            path = write_variant(nb, name, cell, edit, work / nb)
            runs = args.reruns if name == "reference" else 1
            for i in range(runs):
                t0 = time.time()
                r = timing.time_notebook(path, _SRC[nb], reps=args.reps, sandbox=False)
                rows.append({**r.to_json(), "notebook": nb, "variant": name, "run": i,
                             "wall_s": round(time.time() - t0, 1)})
                print(f"{nb} {name:24s} run {i}: {r.status.value}: {r.message} ({rows[-1]['wall_s']} s)", flush=True)
            rows[-1]["events_ms"] = events_ms(nb, path)
            print(f"{nb} {name:24s} events {rows[-1]['events_ms']:.3f} ms", flush=True)
    (args.out / "timing_ranking.json").write_text(json.dumps(rows, indent=1))
    lines = []
    for nb in args.notebooks:
        mine = [r for r in rows if r["notebook"] == nb]
        refs = [r["ratio"] for r in mine if r["variant"] == "reference" and r.get("ratio")]
        if len(refs) > 1:
            lines.append(f"{nb}: reference against itself over {len(refs)} reruns: ratios "
                         f"{', '.join(f'{x:.3f}' for x in refs)}; CV {statistics.pstdev(refs) / statistics.mean(refs):.2%}")
        last = {r["variant"]: r for r in mine}  # the last run of each variant carries do_bench
        by_stage = sorted(last, key=lambda v: -(last[v].get("ratio") or 0))
        by_bench = sorted(last, key=lambda v: last[v]["events_ms"])
        lines.append(f"{nb}: stage order {by_stage}; events order {by_bench}; "
                     f"{'MATCH' if by_stage == by_bench else 'DIFFER'}")
        for v in by_bench:
            r = last[v]
            lines.append(f"   {v:24s} ratio {r.get('ratio') or 0:.3f}  {r.get('rate') or 0:8.1f} {r['unit']}  "
                         f"stage {r.get('learner_ms') or 0:.3f} ms  events {r['events_ms']:.3f} ms  {r['status']}")
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
