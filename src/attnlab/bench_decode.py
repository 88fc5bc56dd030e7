"""Timing one decoding step on a GPU (notebook 08): split-K kernels, notebook 05's kernel at T_q = 1, SDPA.

Decoding reads the whole KV cache for a handful of FLOPs per byte, so every implementation is scored
by the same figure: bytes of K and V in the cache, 2 · B · H_kv · T_k · D · 2 (bf16), divided by its
time. That is an effective bandwidth to hold against the device's copy bandwidth.

Each step is timed twice: as Python launches it (``triton.testing.do_bench``: the GPU also waits for
the host to issue the launches, a floor of tens of µs per step), and replayed from a CUDA graph
(``triton.testing.do_bench_cudagraph``: the kernels' own time, as an inference server that captures
its decode step sees it). The graph replays the step on several copies of the inputs in turn, enough
to exceed the L2 cache several times over, so a small cache is not served from L2 (``do_bench``
flushes L2 before each run; ``do_bench_cudagraph`` does not).
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from . import launch_decode
from .bench import gb_per_s, median_ms, show_recorded_plot
from .reference_decode import kv_bytes

__all__ = ["DecodePoint", "splitk_step", "fwd05_step", "sdpa_step", "time_point", "graph_ms", "rotation_sets",
           "decode_sweep", "capture", "step_both_ways", "format_both_ways", "write_csv", "read_csv", "format_table",
           "plot_decode", "show_recorded", "IMPLS"]

#: Implementations compared, in plotting order.
IMPLS = ("split-K", "05 kernel, T_q=1", "SDPA, T_q=1")


@dataclass
class DecodePoint:
    """One timed decoding step. ``ms``/``gbs``: launched from Python (``do_bench``); ``graph_ms``/
    ``graph_gbs``: replayed from a CUDA graph (NaN when not measured). ``status`` is ``ok``, ``oom``
    or ``error: ...``; ``graph_status`` likewise for the graph timing."""

    impl: str
    B: int
    H_q: int
    H_kv: int
    T_k: int
    D: int
    ms: float = float("nan")
    gbs: float = float("nan")
    status: str = "ok"
    config: str = ""
    graph_ms: float = float("nan")
    graph_gbs: float = float("nan")
    graph_status: str = ""


def splitk_step(partial_kernel, merge_kernel, q, k_cache, v_cache, cache_seqlens, *, causal=True,
                num_splits=None, block_n=None, num_warps=4, num_stages=2):
    """(step, config): a function running both kernels into buffers allocated once, as ``flash_decode``
    launches them (the launcher's input checks and NaN fills are left out: they are test aids)."""
    cfg = launch_decode.launch_config(partial_kernel, q, k_cache, v_cache, cache_seqlens, causal=causal,
                                      num_splits=num_splits, block_n=block_n, num_warps=num_warps, num_stages=num_stages)
    B, H_q, T_q, D = q.shape
    o_part = torch.empty(B, H_q, T_q, cfg.num_splits, D, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(B, H_q, T_q, cfg.num_splits, device=q.device, dtype=torch.float32)
    o, lse = torch.empty_like(q), torch.empty(B, H_q, T_q, device=q.device, dtype=torch.float32)

    def step():
        launch_decode.run_decode_partial(partial_kernel, q, k_cache, v_cache, cache_seqlens, o_part, lse_part,
                                         causal=causal, cfg=cfg, num_warps=num_warps, num_stages=num_stages)
        return launch_decode.run_decode_merge(merge_kernel, o_part, lse_part, o, lse)

    config = (f"splits={cfg.num_splits} block_m={cfg.block_m} block_n={cfg.block_n} warps={num_warps} "
              f"stages={num_stages}")
    return step, config


def fwd05_step(kernel, q, k_cache, v_cache, *, block_m=16, block_n=64, num_warps=4, num_stages=2):
    """(step, config): notebook 05's forward kernel as it would serve one query per head.

    Its launcher knows neither a cache nor GQA, so K and V are expanded to H_q heads (what an
    implementation without GQA stores) and the kernel runs one query tile per head: grid (1, B·H_q)
    over all T_k keys, non-causal (at T_q = 1 the newest token sees the whole cache). Its Q and O
    have T_k rows per head because the kernel shares one ``stride_bh`` among Q, K, V and O; only the
    first tile of rows is read and written. Query 0 of each head holds ``q``.
    """
    B, H_q, _, D = q.shape
    T_k = k_cache.shape[2]
    group = H_q // k_cache.shape[1]
    k, v = ((t if group == 1 else t.repeat_interleave(group, dim=1)).contiguous() for t in (k_cache, v_cache))
    q_full = torch.zeros(B, H_q, T_k, D, device=q.device, dtype=q.dtype)
    q_full[:, :, :1] = q[:, :, :1]
    o_full = torch.empty_like(q_full)
    lse = torch.empty(B, H_q, T_k, device=q.device, dtype=torch.float32)

    def step():
        kernel[(1, B * H_q)](q_full, k, v, o_full, lse, T_k * D, D, T_k, D ** -0.5, CAUSAL=False,
                             BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=D, num_warps=num_warps,
                             num_stages=num_stages)
        return o_full[:, :, :1], lse[:, :, :1]

    return step, f"grid (1, {B * H_q}) block_m={block_m} block_n={block_n} warps={num_warps} stages={num_stages}"


def sdpa_step(q, k_cache, v_cache):
    """(step, config): PyTorch's ``scaled_dot_product_attention`` at T_q = 1 with ``enable_gqa=True``."""
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    gqa = q.shape[1] != k_cache.shape[1]
    return (lambda: sdpa(q, k_cache, v_cache, enable_gqa=gqa)), "default backend"


def graph_ms(steps, rep_ms: float = 30) -> float:
    """Median time in ms of one call of a step, the ``steps`` (the same step on different inputs) replayed
    in turn from one CUDA graph by ``triton.testing.do_bench_cudagraph`` (no Python between launches).

    Raises:
        whatever capturing raises (a step that synchronises or allocates on the host, for instance).
    """
    from triton.testing import do_bench_cudagraph

    def all_steps():
        for step in steps:
            step()

    return float(do_bench_cudagraph(all_steps, rep=rep_ms, return_mode="median")) / len(steps)


def rotation_sets(nbytes: int, *, times_l2: int = 4, most: int = 16) -> int:
    """How many copies of a step's inputs (``nbytes`` each) the graph timing cycles through so that
    together they exceed the L2 cache ``times_l2`` times (at most ``most``; 1 for large inputs)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0) or 64 * 2**20
    return max(1, min(most, math.ceil(times_l2 * l2 / max(1, nbytes))))


def time_point(impl: str, step, config: str, B, H_q, H_kv, T_k, D, element_size=2, graph_steps=None) -> DecodePoint:
    """Time ``step`` (median of do_bench) and, with ``graph_steps`` (the same step on rotated inputs),
    also from a CUDA graph (:func:`graph_ms`); score both by the bytes of the KV cache it must read."""
    point = DecodePoint(impl, B, H_q, H_kv, T_k, D, config=config)
    nbytes = kv_bytes(B, H_kv, T_k, D, element_size)
    try:
        point.ms = median_ms(step)
        point.gbs = gb_per_s(nbytes, point.ms)
    except torch.cuda.OutOfMemoryError:
        point.status = "oom"
    except Exception as exc:  # noqa: BLE001 (a failed point is a result, reported in the table)
        point.status = f"error: {type(exc).__name__}: {exc}"[:200]
    if graph_steps:
        try:
            point.graph_ms = graph_ms(graph_steps)
            point.graph_gbs = gb_per_s(nbytes, point.graph_ms)
            point.graph_status = f"ok ({len(graph_steps)} input sets)"
        except torch.cuda.OutOfMemoryError:
            point.graph_status = "oom"
        except Exception as exc:  # noqa: BLE001
            point.graph_status = f"error: {type(exc).__name__}: {exc}"[:200]
    return point


def _random_cache(B, H_q, H_kv, T_k, D, dtype, seed):
    """q (B, H_q, 1, D), full caches (B, H_kv, T_k, D) of random values, and their lengths (all T_k)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H_q, 1, D, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(B, H_kv, T_k, D, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(B, H_kv, T_k, D, device="cuda", dtype=dtype, generator=g)
    return q, k, v, torch.full((B,), T_k, device="cuda", dtype=torch.int32)


def decode_sweep(partial_kernel, merge_kernel, fwd_kernel=None, *, batches=(1, 8), kv_heads=(8, 32), H_q=32,
                 D=128, lengths=(4096, 8192, 16384, 32768, 65536, 131072), dtype=torch.bfloat16,
                 splitk_options=None, cuda_graph: bool = True, log=print) -> list[DecodePoint]:
    """Time split-K, notebook 05's kernel (when ``fwd_kernel`` is given) and SDPA on full caches.

    Every sequence of the batch holds T_k keys (``cache_seqlens`` = T_k), T_q = 1, random inputs.
    With ``cuda_graph`` each step is also timed replayed from a CUDA graph, cycling through
    :func:`rotation_sets` copies of the inputs.
    Returns one :class:`DecodePoint` per implementation, batch, KV-head count and length.
    """
    splitk_options = splitk_options or {}
    makers = [("split-K", lambda q, k, v, lens: splitk_step(partial_kernel, merge_kernel, q, k, v, lens,
                                                            **splitk_options)),
              ("05 kernel, T_q=1", lambda q, k, v, lens: fwd05_step(fwd_kernel, q, k, v)),
              ("SDPA, T_q=1", lambda q, k, v, lens: sdpa_step(q, k, v))]
    if fwd_kernel is None:
        del makers[1]
    points = []
    for B in batches:
        for H_kv in kv_heads:
            for T_k in lengths:
                n_sets = rotation_sets(kv_bytes(B, H_kv, T_k, D, dtype.itemsize)) if cuda_graph else 1
                try:
                    sets = [_random_cache(B, H_q, H_kv, T_k, D, dtype, seed=T_k + B + H_kv + 1000 * i)
                            for i in range(n_sets)]
                except torch.cuda.OutOfMemoryError:
                    points += [DecodePoint(impl, B, H_q, H_kv, T_k, D, status="oom") for impl, _ in makers]
                    torch.cuda.empty_cache()
                    continue
                for impl, make in makers:
                    try:
                        built = [make(*inputs) for inputs in sets]
                        point = time_point(impl, built[0][0], built[0][1], B, H_q, H_kv, T_k, D, dtype.itemsize,
                                           graph_steps=[step for step, _ in built] if cuda_graph else None)
                        del built
                    except torch.cuda.OutOfMemoryError:
                        point = DecodePoint(impl, B, H_q, H_kv, T_k, D, status="oom")
                    points.append(point)
                    log(f"{impl:<18} B={B} H_kv={H_kv:<3} T_k={T_k:<7} {point.ms * 1e3:7.1f} us {point.gbs:6.0f} GB/s"
                        f" | CUDA graph {point.graph_ms * 1e3:7.1f} us {point.graph_gbs:6.0f} GB/s  {point.status}"
                        f" {point.graph_status}  {point.config}")
                    torch.cuda.empty_cache()
                del sets
                torch.cuda.empty_cache()
    return points


def _one_call_us(fn, reps: int, flush) -> float:
    """Median over ``reps`` of one call of ``fn`` in µs: CUDA events around the call, issued on an idle GPU
    after an L2 flush, so the host's work before the GPU can start counts (what a decoding loop sees)."""
    import statistics

    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def capture(fn):
    """``fn`` recorded in a CUDA graph: (replay, its output). Two calls on a side stream come first, so
    that compiling and the allocator's first requests happen outside the capture.

    Raises:
        whatever capturing raises (``fn`` reading a GPU value on the host, for instance).
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def step_both_ways(flash_decode, *, B: int = 1, H_q: int = 32, H_kv: int = 8, T_k: int = 32768, D: int = 128,
                   dtype=torch.bfloat16, reps: int = 100) -> dict[str, float | str]:
    """One decoding step by ``flash_decode`` (the notebook's launcher) and by SDPA, each called from
    Python and replayed from a CUDA graph: name -> median µs per step (:func:`_one_call_us`), or why
    it could not be measured. Also ``"max |flash_decode - SDPA| (graph)"``: the replayed output's error."""
    q, k, v, lens = _random_cache(B, H_q, H_kv, T_k, D, dtype, seed=0)
    flush = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    steps = {"flash_decode": lambda: flash_decode(q, k, v, lens)[0],
             "SDPA": sdpa_step(q, k, v)[0]}
    rows: dict[str, float | str] = {}
    outs = {}
    for name, step in steps.items():
        step()
        rows[f"{name}, from Python"] = _one_call_us(step, reps, flush)
        try:
            replay, outs[name] = capture(step)
            rows[f"{name}, replayed from a CUDA graph"] = _one_call_us(replay, reps, flush)
        except Exception as exc:  # noqa: BLE001  (a step that cannot be captured is a result)
            rows[f"{name}, replayed from a CUDA graph"] = f"cannot be captured: {type(exc).__name__}: {exc}"[:200]
    if len(outs) == 2:
        diff = outs["flash_decode"].float() - outs["SDPA"].float()
        rows["max |flash_decode - SDPA| (graph)"] = float(diff.abs().max())
    rows["bytes"] = float(kv_bytes(B, H_kv, T_k, D, dtype.itemsize))
    return rows


def format_both_ways(rows: dict) -> str:
    """:func:`step_both_ways`'s result as lines: µs per step and GB/s of K and V read."""
    nbytes = rows["bytes"]
    lines = []
    for name, value in rows.items():
        if name == "bytes":
            continue
        if isinstance(value, float) and name.startswith("max"):
            lines.append(f"{name:45s} {value:.3g}")
        elif isinstance(value, float):
            lines.append(f"{name:45s} {value:8.1f} µs  {gb_per_s(nbytes, value / 1e3):6.0f} GB/s")
        else:
            lines.append(f"{name:45s} {value}")
    return "\n".join(lines)


def write_csv(points, path) -> None:
    """One row per point, columns as :class:`DecodePoint`."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[x.name for x in fields(DecodePoint)])
        w.writeheader()
        for p in points:
            w.writerow(asdict(p))


def read_csv(path) -> list[DecodePoint]:
    """The points written by :func:`write_csv`."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            out.append(DecodePoint(row["impl"], *(int(row[k]) for k in ("B", "H_q", "H_kv", "T_k", "D")),
                                   ms=float(row["ms"]), gbs=float(row["gbs"]), status=row["status"],
                                   config=row["config"], graph_ms=float(row.get("graph_ms") or "nan"),
                                   graph_gbs=float(row.get("graph_gbs") or "nan"),
                                   graph_status=row.get("graph_status") or ""))
    return out


def format_table(points, copy_gbs: float | None = None) -> str:
    """One line per (B, H_kv, T_k): each implementation's µs and GB/s launched from Python, then replayed
    from a CUDA graph; split-K's fraction of ``copy_gbs`` and its speed-up over the 05 kernel (both ways)."""
    by = {(p.impl, p.B, p.H_kv, p.T_k): p for p in points}
    impls = [i for i in IMPLS if any(p.impl == i for p in points)]
    short = {"split-K": "split-K", "05 kernel, T_q=1": "05 kernel", "SDPA, T_q=1": "SDPA"}
    head = f"{'B':>2} {'H_kv':>4} {'T_k':>6} " + "".join(f"| {short[i] + ' us, GB/s; graph':<33}" for i in impls)
    if copy_gbs:
        head += "| split-K x copy (graph) "
    if "05 kernel, T_q=1" in impls:
        head += "| split-K / 05 (graph)"
    lines = [head]
    for B, H_kv, T_k in sorted({(p.B, p.H_kv, p.T_k) for p in points}):
        line = f"{B:>2} {H_kv:>4} {T_k:>6} "
        for i in impls:
            p = by.get((i, B, H_kv, T_k))
            line += (f"| {p.ms * 1e3:7.1f} {p.gbs:5.0f}; {p.graph_ms * 1e3:7.1f} {p.graph_gbs:5.0f}        " if p
                     else "| " + " " * 32)
        sk, f5 = by.get(("split-K", B, H_kv, T_k)), by.get(("05 kernel, T_q=1", B, H_kv, T_k))
        if copy_gbs:
            line += f"| {sk.gbs / copy_gbs:.2f} ({sk.graph_gbs / copy_gbs:.2f})          " if sk else "| " + " " * 22
        if sk and f5:
            line += f"| {f5.ms / sk.ms:4.1f}x ({f5.graph_ms / sk.graph_ms:4.1f}x)"
        lines.append(line)
    return "\n".join(lines)


def plot_decode(points, copy_gbs: float | None = None, title: str = "", path: str | Path | None = None):
    """GB/s of K and V read against T_k: one panel per batch size, a line per implementation and H_kv
    (split-K also replayed from a CUDA graph, where measured), and the copy bandwidth (read + write)
    as the ceiling. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    batches = sorted({p.B for p in points})
    fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4.6), sharey=True, squeeze=False)
    colors = dict(zip(IMPLS, ("tab:blue", "tab:orange", "tab:green")))
    kv_heads = sorted({p.H_kv for p in points})
    for ax, B in zip(axes[0], batches):
        for impl in IMPLS:
            for H_kv, style, marker in zip(kv_heads, ("-", "--", ":"), ("o", "s", "^")):
                pts = sorted((p for p in points if p.B == B and p.impl == impl and p.H_kv == H_kv
                              and p.status == "ok"), key=lambda p: p.T_k)
                if pts:
                    ax.plot([p.T_k for p in pts], [p.gbs for p in pts], style, marker=marker, color=colors[impl],
                            label=f"{impl}, H_kv={H_kv}")
                graphed = [p for p in pts if impl == "split-K" and math.isfinite(p.graph_gbs)]
                if graphed:  # the kernels' own time: no Python launch floor
                    ax.plot([p.T_k for p in graphed], [p.graph_gbs for p in graphed], style, marker="x",
                            color="tab:purple", label=f"{impl}, CUDA graph, H_kv={H_kv}")
        if copy_gbs:
            ax.axhline(copy_gbs, color="black", lw=1, ls="-.", label=f"copy bandwidth (read + write), {copy_gbs:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("keys in the cache, T_k")
        ax.set_title(f"B = {B}, H_q = {points[0].H_q}, D = {points[0].D}, T_q = 1")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("GB/s of K and V read")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def show_recorded() -> None:
    """Show the measurement recorded on an H200 (the package's ``data/decode_h200.png``), for CPU runs."""
    print("No GPU here: this is the recorded measurement.")
    show_recorded_plot("decode_h200.png", "one decoding step, split-K against the 05 kernel and SDPA")
