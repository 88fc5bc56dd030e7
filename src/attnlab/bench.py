"""Measuring on a GPU: medians from ``triton.testing.do_bench``, FLOP and byte counts, rates.

Timing rules the course follows (and teaches): warm up first, time with CUDA events, report the
median of many runs, never time zeros, and compare against ceilings measured on the same device.
"""

from __future__ import annotations

import torch

__all__ = ["median_ms", "attention_flops", "tflops", "gb_per_s", "copy_bandwidth_gbs", "matmul_tflops",
           "sdpa_backend", "kernel_resources"]


def median_ms(fn, warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median time of ``fn()`` in milliseconds, by ``triton.testing.do_bench`` (CUDA events).

    ``warmup_ms`` and ``rep_ms`` are durations, not counts (do_bench's convention). On a CPU (no
    CUDA) this falls back to a wall-clock median of a few runs, good only for dry runs.
    """
    if torch.cuda.is_available():
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    import statistics
    import time

    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def attention_flops(B: int, H: int, T: int, D: int, causal: bool, T_k: int | None = None) -> float:
    """Forward FLOPs of attention: two matmuls of 2·T_q·T_k·D each per head, i.e. 4·B·H·T²·D.

    Causal attention does about half of it, and the course (like FlashAttention's benchmarks)
    counts exactly half.
    """
    T_k = T if T_k is None else T_k
    flops = 4.0 * B * H * T * T_k * D
    return flops / 2 if causal else flops


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s of ``flops`` done in ``ms`` milliseconds."""
    return flops / (ms * 1e-3) / 1e12


def gb_per_s(n_bytes: float, ms: float) -> float:
    """GB/s (10^9 bytes per second) of ``n_bytes`` moved in ``ms`` milliseconds."""
    return n_bytes / (ms * 1e-3) / 1e9


# Host overhead and byte-sized benchmarks (notebooks 04 and 06).
from typing import NamedTuple  # noqa: E402

__all__ += ["rows_for_bytes", "PerCall", "per_call_us"]


def rows_for_bytes(n_cols: int, element_size: int, moved_bytes: int = 1 << 30) -> int:
    """Rows of ``n_cols`` elements such that reading them once and writing them once moves about
    ``moved_bytes`` bytes (at least one row).

    A bandwidth benchmark must move enough bytes that the fixed costs of a launch (a few
    microseconds of start-up and tail) vanish next to the transfer: at 4 TB/s, 32 MiB take 8 µs,
    the same order as those costs, while 1 GiB takes 250 µs.
    """
    return max(1, moved_bytes // (2 * n_cols * element_size))


class PerCall(NamedTuple):
    """Microseconds per call of a function: ``host_us`` for the host to issue it (Python, checks,
    allocations, the launch itself) and ``wall_us`` per call of a back-to-back run until the GPU
    is done, which is ``max(host, GPU)`` per call once the run is long enough."""

    host_us: float
    wall_us: float


def per_call_us(fn, n_calls: int = 100, repeats: int = 7) -> PerCall:
    """Host and wall-clock microseconds per call of ``fn()``, medians over ``repeats`` runs.

    Each run synchronises, calls ``fn`` ``n_calls`` times without synchronising (CUDA queues the
    kernels and returns; about a thousand launches fit in the queue, so ``n_calls`` = 100 never
    blocks on it), reads the clock (host time), then synchronises and reads it again (wall time).
    ``do_bench`` cannot show the host's share: it times on the GPU, and its L2 flush before each
    call gives the host a head start. On a CPU both numbers are the same wall-clock time.
    """
    import statistics
    import time

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()
    sync()
    host, wall = [], []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(n_calls):
            fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        host.append((t1 - t0) / n_calls * 1e6)
        wall.append((t2 - t0) / n_calls * 1e6)
    return PerCall(statistics.median(host), statistics.median(wall))


def copy_bandwidth_gbs(n_bytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return gb_per_s(2 * n_bytes, ms)


def matmul_tflops(n: int = 8192, dtype=torch.bfloat16) -> float:
    """Dense n×n×n matmul rate in TFLOP/s on random (not zero) data: the device's practical peak."""
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = median_ms(lambda: a @ b)
    return tflops(2.0 * n**3, ms)


def sdpa_backend(q, k, v, causal: bool) -> str:
    """Which kernel ``scaled_dot_product_attention`` dispatched to, from the profiler's kernel names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
    names = " ".join(e.key.lower() for e in prof.key_averages())
    for key, label in (("cudnn", "cuDNN"), ("flash", "FlashAttention-2 (flash backend)"),
                       ("fmha", "memory-efficient (cutlass)"), ("efficient", "memory-efficient")):
        if key in names:
            return label
    return "math (unfused)"


def kernel_resources(launcher, *args, **kwargs) -> str:
    """Registers, spills and shared memory of the kernel ``launcher(*args, **kwargs)`` launches.

    ``launcher`` is a course launcher (``launch.run_flash_kernel``, ``launch.run_softmax_kernel``):
    its launch is recorded, not run, and compiled as it would run: for this GPU, or without one
    for the H100/H200 (sm_90, cross-compiled: see :mod:`attnlab.gpu_compile`). Advice for tuning
    (tile sizes, warps, stages), never a grade.

    Returns:
        one line such as ``"168 registers/thread, no spills, 48 KiB shared memory (sm_90)"``, or
        why there is none (the kernel does not compile, or the figures are skipped while grading).
    """
    from . import gpu_compile
    from .grading.kernel import guard

    if guard.active() and _on_cpu():
        return "(not compiled while autograding on a CPU: run the notebook to see it)"
    with gpu_compile.captured() as launches:
        launcher(*args, **kwargs)
    if not launches:
        return "(no launch recorded)"
    rec = launches[-1]
    try:
        res = gpu_compile.resources(rec.kernel, rec.args, rec.constexprs, num_warps=rec.num_warps,
                                    num_stages=rec.num_stages)
    except (AssertionError, NotImplementedError) as exc:
        return f"(does not compile: {str(exc).splitlines()[0]})"
    return gpu_compile.describe_resources(res)


def _on_cpu() -> bool:
    from .core.device import runtime

    return runtime().interpret

__all__ += ["show_recorded_plot", "autograding"]


def recorded_data(filename: str):
    """The package's recorded GPU measurement ``attnlab/data/<filename>`` (an importlib.resources
    Traversable), or None when this install lacks it. A release notebook has no sibling files on Colab,
    and notes/ is not installed, so the recorded figures travel as package data."""
    from importlib.resources import files

    src = files("attnlab").joinpath("data", filename)
    return src if src.is_file() else None


def show_recorded_plot(filename: str, what: str) -> None:
    """Display a plot recorded on an H200 that ships with the package (``attnlab/data/<filename>``).

    ``what`` says what the plot shows (printed above it). Prints a note instead when this install of
    attnlab lacks the file (:func:`recorded_data`).
    """
    png = recorded_data(filename)
    if png is None:
        print(f"No recorded measurement {filename} in this install of attnlab.")
        return
    from IPython.display import Image, display

    print(f"Recorded on an NVIDIA H200 with the course's reference kernels: {what} "
          "(notes/gpu/2026-11-30/ in the course repository).")
    display(Image(data=png.read_bytes()))


def autograding() -> bool:
    """True while a notebook is being autograded (:func:`attnlab.grading.kernel.guard.active`). The notebooks'
    measurement cells (timings, sweeps, compiling many tile configs) and figures are not graded; under
    the grader they skip with a note (or show the figures recorded on an H200 instead, 08 and 09), so
    that grading a class costs minutes, not hours, and the autograded notebook holds no shrunken
    stand-in for the learner's own measurements."""
    from .grading.kernel import guard

    return guard.active()
