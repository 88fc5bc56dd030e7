"""The scale-up sweep of notebook 06: time attention implementations over T, tune a kernel, plot.

Each implementation is a function ``fn(q, k, v, causal) -> o`` (extra outputs such as the LSE are
ignored). Out-of-memory is a result, not a crash: it is recorded and that implementation is not
tried at larger T.
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from .bench import attention_flops, median_ms, recorded_data, tflops

__all__ = ["Point", "naive_unfused", "sdpa", "kernel_only", "run_sweep", "tune", "print_tuning", "recorded_tuning",
           "write_csv", "read_csv", "plot_sweep"]


@dataclass
class Point:
    """One timed configuration. ``status`` is ``ok``, ``oom``, ``skipped`` or ``error: ...``."""

    impl: str
    T: int
    B: int
    H: int
    D: int
    causal: bool
    dtype: str
    ms: float = float("nan")
    tflops: float = float("nan")
    peak_mem_gib: float = float("nan")
    status: str = "ok"
    config: str = ""

    def peak_mem_text(self) -> str:
        """The peak memory for a table, 12 characters: "  1.23 GiB", or why there is none."""
        if self.peak_mem_gib == self.peak_mem_gib:  # not NaN
            return f"{self.peak_mem_gib:8.2f} GiB"
        return "   n/a (CPU)" if self.status == "ok" else "         n/a"  # timed on a CPU, or not timed


def naive_unfused(q, k, v, causal):
    """Attention as three library calls in the input dtype: matmul, softmax, matmul.

    Every step writes its (B, H, T, T) result to memory, which is what the course calls naive.
    """
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        T_q, T_k = s.shape[-2:]
        mask = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa(q, k, v, causal):
    """PyTorch's ``scaled_dot_product_attention`` with its default backend choice."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def kernel_only(kernel, **config):
    """``fn(q, k, v, causal) -> o`` that launches a ``_flash_fwd_kernel`` alone, into outputs allocated once.

    What it times is the kernel: the raw launch (:func:`attnlab.launch.run_flash_kernel`, the
    launch the given launcher ends with) into an O and LSE kept from the previous call of the same
    shape. The launcher ``triton_flash_attention`` also validates its inputs and allocates two
    NaN-filled outputs on every call (a testing aid): host work and GPU fills that SDPA does not
    pay, and at small T more time than the kernel itself. Inputs must be contiguous (B, H, T, D),
    as the launcher would make them; ``config`` holds block_m, block_n, num_warps, num_stages
    (the launcher's defaults otherwise). Check correctness through the launcher first: the outputs
    here start uninitialised.
    """
    from .launch import run_flash_kernel

    config = {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2, **config}
    outputs: dict = {}

    def fn(q, k, v, causal):
        key = (tuple(q.shape), q.dtype, q.device)
        if key not in outputs:
            outputs.clear()  # free the previous size before allocating the next
            outputs[key] = (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                            torch.empty(q.shape[:3], dtype=torch.float32, device=q.device))
        o, lse = outputs[key]
        return run_flash_kernel(kernel, q, k, v, o, lse, causal=causal, **config)[0]

    return fn


def _time_one(fn, q, k, v, causal, point: Point) -> Point:
    on_gpu = q.is_cuda
    try:
        if on_gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        point.ms = median_ms(lambda: fn(q, k, v, causal))
        point.tflops = tflops(attention_flops(point.B, point.H, point.T, point.D, causal), point.ms)
        if on_gpu:
            point.peak_mem_gib = torch.cuda.max_memory_allocated() / 2**30
    except torch.OutOfMemoryError:
        point.status = "oom"
    except Exception as exc:  # a learner's kernel that fails must not stop the sweep
        point.status = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    finally:
        if on_gpu:
            torch.cuda.empty_cache()
    return point


def run_sweep(impls: dict, Ts, *, B=8, H=16, D=64, causal=True, dtype=torch.bfloat16, device="cuda",
              seed=0, progress=True) -> list[Point]:
    """Time every implementation at every T (median of ``do_bench``); returns one Point each.

    Inputs are random normal (never zeros). After an implementation runs out of memory it is
    marked ``skipped`` at larger T.
    """
    from tqdm.auto import tqdm

    dead: set[str] = set()
    points = []
    steps = [(T, name) for T in Ts for name in impls]
    g = torch.Generator(device="cpu").manual_seed(seed)
    bar = tqdm(steps, desc="sweep", disable=not progress)
    q = k = v = None
    for T, name in bar:
        bar.set_postfix_str(f"T={T} {name}")
        if q is None or q.shape[2] != T:
            q = k = v = None
            if device == "cuda":
                torch.cuda.empty_cache()
            try:
                q, k, v = (torch.randn(B, H, T, D, generator=g).to(device=device, dtype=dtype) for _ in range(3))
            except torch.OutOfMemoryError:
                points += [Point(n, T, B, H, D, causal, str(dtype), status="oom") for n in impls]
                break
        p = Point(name, T, B, H, D, causal, str(dtype).replace("torch.", ""))
        if name in dead:
            p.status = "skipped"
        else:
            _time_one(impls[name], q, k, v, causal, p)
            if p.status == "oom":
                dead.add(name)
        points.append(p)
    return points


def tune(make_fn, grid: dict, *, T, B=8, H=16, D=64, causal=True, dtype=torch.bfloat16, device="cuda",
         seed=0, progress=True) -> list[Point]:
    """Time ``make_fn(**config)`` for every combination of ``grid`` (e.g. block_m, block_n, num_warps,
    num_stages) at one T; returns the points sorted fastest first (failed configs last)."""
    from tqdm.auto import tqdm

    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(device=device, dtype=dtype) for _ in range(3))
    keys = list(grid)
    points = []
    for values in tqdm(list(itertools.product(*grid.values())), desc="tune", disable=not progress):
        config = dict(zip(keys, values))
        p = Point("yours", T, B, H, D, causal, str(dtype).replace("torch.", ""),
                  config=" ".join(f"{k}={v}" for k, v in config.items()))
        points.append(_time_one(make_fn(**config), q, k, v, causal, p))
    return _fastest_first(points)


def _fastest_first(points: list[Point]) -> list[Point]:
    return sorted(points, key=lambda p: (p.status != "ok", p.ms))


def print_tuning(points: list[Point], n: int = 8, mark: str = "") -> None:
    """Print the ``n`` first points of :func:`tune`'s result under a header: configuration, ms,
    TFLOP/s, status; the configuration ``mark`` (e.g. the launcher's default) is tagged."""
    print(f"{'configuration':<55} {'time':>11}  {'throughput':>15}  status")
    for p in points[:n]:
        tag = "  <- launcher default" if p.config == mark else ""
        print(f"{p.config:<55} {p.ms:8.3f} ms  {p.tflops:7.1f} TFLOP/s  {p.status}{tag}")


def recorded_tuning() -> list[Point]:
    """Notebook 06's tuning grid timed on an NVIDIA H200 with the reference kernel (bf16, causal,
    B = 8, H = 16, T = 4096, D = 64, the kernel alone; 2026-11-30, torch 2.11, triton 3.6), fastest
    first: the package's ``data/sweep_tuning_h200.csv``, a copy of the course repository's
    ``notes/gpu/2026-11-30/tuning_results.csv``, for learners without a GPU (on Colab the repository
    is not there). Empty when this install lacks the file."""
    from importlib.resources import as_file

    src = recorded_data("sweep_tuning_h200.csv")
    if src is None:
        return []
    with as_file(src) as path:
        return _fastest_first(read_csv(path))


def write_csv(points: list[Point], path: str | Path) -> Path:
    """Write ``points`` to ``path`` (returned), one row each, with a header of :class:`Point`'s fields in
    order: impl; T, B, H, D (sequence length, batch, heads, head dim); causal (True/False); dtype
    (e.g. float16); ms (median forward time, milliseconds); tflops (TFLOP/s of
    :func:`attnlab.bench.attention_flops`, causal counted as half); peak_mem_gib (peak CUDA memory
    allocated, GiB = 2³⁰ bytes; nan on the CPU); status (ok, oom, skipped or "error: ..."); config
    (the tuned configuration, or empty). Unmeasured numbers are written as nan."""
    path = Path(path)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Point)])
        w.writeheader()
        for p in points:
            w.writerow(asdict(p))
    return path


def read_csv(path: str | Path) -> list[Point]:
    """The points of a file written by :func:`write_csv` (same columns and units), typed as :class:`Point`."""
    conv = {fl.name: fl.type for fl in fields(Point)}
    out = []
    with open(path) as f:
        for row in csv.DictReader(f):
            kw = {}
            for key, val in row.items():
                t = conv[key]
                kw[key] = (int(val) if t in (int, "int") else float(val) if t in (float, "float")
                           else val == "True" if t in (bool, "bool") else val)
            out.append(Point(**kw))
    return out


def plot_sweep(points: list[Point], *, ceiling_tflops: float | None = None, title: str = "", path=None):
    """TFLOP/s against T (log x) per implementation, with the matmul ceiling; peak memory beside it.

    Points that ran out of memory are marked with an x on the T axis.
    """
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in dict.fromkeys(p.impl for p in points):
        ok = [p for p in points if p.impl == name and p.status == "ok"]
        oom = [p for p in points if p.impl == name and p.status == "oom"]
        line, = ax1.plot([p.T for p in ok], [p.tflops for p in ok], "o-", label=name)
        ax2.plot([p.T for p in ok], [p.peak_mem_gib for p in ok], "o-", color=line.get_color(), label=name)
        if oom:
            ax1.plot([p.T for p in oom], [0] * len(oom), "x", color=line.get_color(), markersize=10,
                     label=f"{name}: out of memory")
    if ceiling_tflops:
        ax1.axhline(ceiling_tflops, ls="--", color="gray", label=f"bf16 matmul ceiling ({ceiling_tflops:.0f})")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length T")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_ylabel("TFLOP/s (causal: 2·B·H·T²·D)")
    ax2.set_ylabel("peak GPU memory (GiB)")
    ax1.set_title("throughput")
    ax2.set_title("memory")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    return fig
