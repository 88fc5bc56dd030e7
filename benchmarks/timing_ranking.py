"""Does the timing stage rank kernels in the order of their real speed, and repeat itself? (issue 33)

Writes variant submissions of notebooks 04, 05, 07 and 08 (the reference kernel edited into honest
but slower kernels: no causal skipping, one masked loop, two passes over K, one key per iteration
without ``tl.dot``, the output read back, program 0 doing all of dQ, K/V reloaded per query head,
tiles of 16 keys, one split reading every key; some from the mistake corpus ``samples/mistakes/``),
times all variants of a notebook with :func:`attnlab.grading.worker.timing.time_notebooks` (one worker, the
reference timed beside each), times the reference submission in ``--reruns`` - 1 more workers for the
ratio's spread, and measures each variant's launcher call independently in this process by CUDA
events (:func:`events_ms`): the stage's ranking must match that order (variants within 3% of each
other by events count as tied).

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

from attnlab.grading.worker import timing  # noqa: E402

#: notebook number -> the instructor's notebook (the reference every variant is edited from).
SOURCES = {"08": ROOT / "source/attention_kernels_beyond/08_flash_decoding.ipynb",
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


def _mistake(mistake_id: str):
    """The edits of ``samples/mistakes/``'s ``mistake_id`` (a kernel with right numbers, slower), applied to
    the whole notebook (a mistake may edit several cells)."""
    def edit(data: dict) -> dict:
        import nbformat

        from attnlab.grading.course import Course
        from attnlab.grading.samples import apply_mistake, load_mistakes

        mistake = {m.id: m for m in load_mistakes(Course(ROOT))[0]}[mistake_id]
        nb = apply_mistake(nbformat.reads(json.dumps(data), as_version=4), mistake)
        return json.loads(nbformat.writes(nb))
    return edit


#: 08: the keys of one row block read by split 0 alone (the launcher's other splits merge as empty):
#: right numbers, a few programs streaming the whole cache
_ONE_SPLIT_08 = ("    start = split * keys_per_split\n    end = tl.minimum(start + keys_per_split, seqlen)",
                 "    start = split * 0\n    end = tl.where(split == 0, seqlen, 0)  # split 0 reads every key")
#: 08: tiles of 16 keys whatever BLOCK_N the launcher chose
_SMALL_TILE_08 = (("offs_j = tl.arange(0, BLOCK_N)", "offs_j = tl.arange(0, 16)"),
                  ("for start_n in range(start, end, BLOCK_N):", "for start_n in range(start, end, 16):"))


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
           ("dkdv-no-causal-skip", "_bwd_dkdv_kernel", _replace(("lo = (start_n // BLOCK_M) * BLOCK_M", "lo = 0"))),
           ("no-causal-skip", "*", _mistake("07-causal-no-skip")),
           ("dq-program-0-does-all", "*", _mistake("07-program-0-does-all")),
           ("dq-one-key-per-iteration", "*", _mistake("07-one-key-elementwise"))],
    "08": [("reference", None, None),
           ("kv-reloaded-per-head", "*", _mistake("08-per-head-kv-reload")),
           ("tiles-of-16-keys", "_decode_partial_kernel", _replace(*_SMALL_TILE_08)),
           ("split-0-reads-all", "_decode_partial_kernel", _replace(_ONE_SPLIT_08))],
}


def write_variant(nb: str, name: str, cell: str | None, edit, folder: Path) -> Path:
    data = json.loads(SOURCES[nb].read_text())
    if cell == "*":
        data = edit(data)
    elif cell is not None:
        c = next(c for c in data["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == cell)
        c["source"] = edit("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
    path = folder / name / SOURCES[nb].name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def events_ms(nb: str, path: Path, reps: int = 50) -> float:
    """The variant's launcher call timed here by another method than the stage's: CUDA events around
    the call, the GPU kept busy (``torch.cuda._sleep``) while the launcher's Python runs, so the events
    span the GPU's work only; median of ``reps`` on fixed inputs, L2 flushed each time."""
    import importlib.util

    import torch

    bench = timing.BENCHMARKS[SOURCES[nb].stem]
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


def orders_agree(rows: list[dict], tie: float = 0.03) -> bool:
    """Whether the stage's order (by ratio) and the events' order (by time) agree, two variants whose
    events times differ by less than ``tie`` (relative) counting as tied (either order is right)."""
    for a in rows:
        for b in rows:
            stage_faster = (a.get("ratio") or 0) > (b.get("ratio") or 0)
            events_slower = a["events_ms"] > b["events_ms"] * (1 + tie)
            if stage_faster and events_slower:
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notebooks", nargs="+", default=["04", "05", "07"])
    ap.add_argument("--reruns", type=int, default=5, help="separate workers timing the reference (its spread)")
    ap.add_argument("--reps", type=int, default=timing.DEFAULT_REPS)
    ap.add_argument("--events-reps", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("timing_ranking"))
    args = ap.parse_args(argv)
    from attnlab import gpu_compile

    gpu_compile.TARGETS = ()  # events_ms compiles here: for this GPU only, as the timing worker does
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "variants"
    rows = []
    for nb in args.notebooks:
        paths = {name: write_variant(nb, name, cell, edit, work / nb) for name, cell, edit in VARIANTS[nb]}
        # every variant in one worker (as one student's notebooks are), then the reference's reruns alone
        t0 = time.time()
        results = timing.time_notebooks([(p, SOURCES[nb]) for p in paths.values()], reps=args.reps, sandbox=False)
        print(f"{nb}: {len(paths)} variants timed in one worker in {time.time() - t0:.1f} s", flush=True)
        for (name, path), r in zip(paths.items(), results):
            rows.append({**r.to_json(), "notebook": nb, "variant": name, "run": 0})
            print(f"{nb} {name:26s}: {r.status.value}: {r.message} {r.phases}", flush=True)
        for i in range(1, args.reruns):
            t0 = time.time()
            r = timing.time_notebook(paths["reference"], SOURCES[nb], reps=args.reps, sandbox=False)
            rows.append({**r.to_json(), "notebook": nb, "variant": "reference", "run": i,
                         "wall_s": round(time.time() - t0, 1)})
            print(f"{nb} reference rerun {i}: {r.status.value}: {r.message} ({rows[-1]['wall_s']} s)", flush=True)
        for name, path in paths.items():
            row = next(r for r in rows if r["notebook"] == nb and r["variant"] == name and r["run"] == 0)
            try:
                row["events_ms"] = events_ms(nb, path, args.events_reps)
            except Exception as exc:  # noqa: BLE001  (reported in the summary)
                row["events_ms"], row["events_error"] = float("nan"), f"{type(exc).__name__}: {exc}"[:200]
            print(f"{nb} {name:26s} events {row['events_ms']:.3f} ms", flush=True)
        (args.out / "timing_ranking.json").write_text(json.dumps(rows, indent=1))
    lines = []
    for nb in args.notebooks:
        mine = [r for r in rows if r["notebook"] == nb]
        refs = [r["ratio"] for r in mine if r["variant"] == "reference" and r.get("ratio")]
        if len(refs) > 1:
            cv = statistics.pstdev(refs) / statistics.mean(refs)
            lines.append(f"{nb}: reference against itself over {len(refs)} workers: ratios "
                         f"{', '.join(f'{x:.3f}' for x in refs)}; CV {cv:.2%}")
        first = [r for r in mine if r["run"] == 0]
        by_stage = [r["variant"] for r in sorted(first, key=lambda r: -(r.get("ratio") or 0))]
        by_events = [r["variant"] for r in sorted(first, key=lambda r: r["events_ms"])]
        verdict = "MATCH" if by_stage == by_events else "MATCH within 3% ties" if orders_agree(first) else "DIFFER"
        lines.append(f"{nb}: stage order {by_stage}; events order {by_events}; {verdict}")
        for r in sorted(first, key=lambda r: r["events_ms"]):
            lines.append(f"   {r['variant']:26s} ratio {r.get('ratio') or 0:.3f}  {r.get('rate') or 0:8.1f} "
                         f"{r['unit']}  "
                         f"stage {r.get('learner_ms') or 0:.3f} ms  events {r['events_ms']:.3f} ms  {r['status']}"
                         f"  job {r.get('phases', {}).get('job_s', '?')} s")
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
