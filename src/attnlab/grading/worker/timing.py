"""Time a learner's kernels on the grading GPU, out of the learner's reach (issue 33's timing stage).

What is timed is the kernel that the learner's solution cells *define*, nothing else of the notebook:
:func:`kernel_source` (:mod:`.kernel_cells`) keeps, of each kernel cell, only the ``@triton.jit`` function definitions and
plain numeric constants, and drops every other statement (module-level code could patch a timer, a
stream or the checker). Those definitions are written into a module of their own and loaded in a
fresh process (:func:`run_worker`, sandboxed like a notebook's kernel when bubblewrap works; one per
student, for all of that student's timed notebooks: :func:`time_notebooks`), which never ran a
notebook. There the course's given launcher runs the learner's kernels and the
course's reference kernels (the instructor notebook's solution cells, extracted the same way) on one
documented shape per notebook (:data:`BENCHMARKS`):

- fresh seeded inputs for every repetition (a secret seed mixed in while grading), so no result can
  be cached from an earlier call; the learner's kernels run first in each, before the right answer
  for those inputs exists anywhere in memory;
- the GPU's L2 cache flushed before each call; the time is what CUDA's activity records (the
  profiler's CUPTI) give for the learner's kernels alone, so the launcher's Python and its output
  allocations, the same for everyone, do not blur the comparison;
- every repetition's output checked against PyTorch's own attention (or softmax): a repetition that
  is wrong, or skipped, fails the stage instead of being timed;
- the kernels compiled first without running (:func:`attnlab.gpu_compile.compile_only`), then the
  inputs, the warm-up and the repetitions run in the GPU's turn, which the grader holds for the worker
  (:mod:`.gpu_turn`): the workers of several students start and compile at once (``attnlab speed
  --jobs``) while one at a time has the GPU.

The result (:class:`Timing`) is the ratio of the reference's median time to the learner's (> 1:
faster than the reference), the learner's TFLOP/s or GB/s, the GPU's name and the versions. On a
machine without a GPU the stage reports :attr:`Status.NEEDS_GPU` and times nothing.

Run it: ``python -m attnlab.grading.worker.timing SUBMITTED_NOTEBOOK [--reps N] [--json FILE]``.
Sources of the method: GPU MODE's reference-kernels evaluator (events after an L2 flush, a secret
seed, every call re-checked), Triton's ``triton.testing.do_bench`` (the flush buffer).
"""
# Length: One job: the timing stage (timing the learner's kernels in a sandbox and reporting; reading
# them is :mod:`.kernel_cells`); its steps share one record.

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

from .kernel_cells import KernelSource, ReachesPython, cells_of, kernel_source  # re-exported: what is timed

__all__ = ["Benchmark", "BENCHMARKS", "Status", "Timing", "KernelSource", "ReachesPython", "kernel_source", "cells_of",
           "time_notebook", "time_notebooks", "run_worker", "DEFAULT_REPS"]


@dataclass(frozen=True)
class Benchmark:
    """One notebook's timing stage, declared as data.

    Attributes:
        cells: grade ids of the solution cells that define the kernels, in the launcher's order.
        shape: the documented problem size (a real model's, not a test's).
        unit: ``"TFLOP/s"`` (attention) or ``"GB/s"`` (softmax, decoding: bound by memory).
    """

    notebook: str
    cells: tuple[str, ...]
    shape: MappingProxyType
    unit: str


def _shape(**kw) -> MappingProxyType:
    return MappingProxyType(kw)


#: The timed notebooks. FLOPs of attention: 4·B·H·T²·D, halved when causal; the backward 2.5× that
#: (two products recomputed or formed per tile against the forward's two: Triton's tutorial 06).
BENCHMARKS = MappingProxyType({b.notebook: b for b in (
    Benchmark("04_triton_softmax", ("_softmax_kernel",), _shape(rows=4096, cols=8192), "GB/s"),
    Benchmark("05_triton_flash", ("_flash_fwd_kernel",),
              _shape(B=8, H=16, T=4096, D=64, causal=True, dtype="bfloat16"), "TFLOP/s"),
    Benchmark("07_triton_backward", ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"),
              _shape(B=8, H=16, T=4096, D=64, causal=True, dtype="bfloat16"), "TFLOP/s"),
    Benchmark("08_flash_decoding", ("_decode_partial_kernel", "_decode_merge_kernel"),
              _shape(B=1, H_q=32, H_kv=8, T=32768, D=128, causal=True, dtype="bfloat16"), "GB/s"),
)})


class Status(str, enum.Enum):
    """How a timing stage ended (a ``str``, so it reads plainly in JSON and CSV)."""

    TIMED = "timed"            # every repetition right; ratio and rate measured
    WRONG = "wrong"            # a repetition's output was wrong: not timed
    FAILED = "failed"          # the kernel did not build or launch, or the worker died
    NEEDS_GPU = "needs GPU timing"  # no GPU here: nothing timed (reported for review, never graded)
    RETRY = "to time again"    # the grader's own trouble (the GPU's lock, a worker lost): no verdict, no points
    NOT_TIMED = "not timed"    # no timing stage for this notebook


@dataclass
class Timing:
    """The outcome of one notebook's timing stage.

    Attributes:
        ratio: reference median time / learner median time (1.25: 25% faster than the reference).
        learner_ms, reference_ms: median times of one launcher call, in milliseconds.
        rate: the learner's throughput in ``unit``; cv: the learner's times' coefficient of variation.
        message: for people: why it was not timed, or what was measured.
        dropped: statements of the kernel cells that were not run (not function definitions).
        phases: where the stage's wall time went, in seconds (``worker_start_s``: the worker's start-up,
            paid by the first notebook of a worker; on a GPU ``compile_s``: compiling both sides, and
            ``gpu_wait_s``: waiting for the GPU's turns (:mod:`.gpu_turn`); ``warmup_s``: the checked
            warm-up; ``reps_s``: the timed repetitions; ``job_s``: this notebook's whole time in the worker).
    """

    notebook: str
    status: Status
    message: str = ""
    ratio: float | None = None
    learner_ms: float | None = None
    reference_ms: float | None = None
    rate: float | None = None
    unit: str = ""
    cv: float | None = None
    reps: int = 0
    device: str = ""
    versions: dict = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    phases: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**asdict(self), "status": self.status.value}


# --------------------------------------------------------------------------------------- the host
#: Timed repetitions per kernel by default. The reference of 05 against itself varied by 0.04% over five
#: reruns at 30 repetitions, 07's by 0.08% and 08's by 0.20% at 20 (H200, notes/gpu/2026-12-02/): ten keep
#: the spread far inside the 2% the issue allows, at a third of the time.
DEFAULT_REPS = 10
#: Checked calls of each side before the timed ones (the first compiles).
WARMUP = 1


def time_notebook(submitted: Path, reference: Path, *, reps: int = DEFAULT_REPS, seed: int | None = None,
                  sandbox: bool = True, timeout_s: float = 300.0, shape: dict | None = None) -> Timing:
    """Time the kernels a submitted notebook defines against the reference notebook's.

    Args:
        submitted: the learner's ``NN_name.ipynb``; reference: the instructor's (solutions filled).
        reps: timed repetitions of each (after :data:`WARMUP` checked ones).
        seed: the inputs' seed; None draws a secret one (grading).
        sandbox: run the worker under bubblewrap (:mod:`attnlab.grading.sandbox`) when it works here.
        shape: override the benchmark's shape (tests: small sizes under the interpreter).

    Returns:
        A :class:`Timing`; never raises for a learner's fault (a kernel that fails is ``FAILED``).
    """
    shapes = None if shape is None else {submitted.stem: shape}
    return time_notebooks([(submitted, reference)], reps=reps, seed=seed, sandbox=sandbox, timeout_s=timeout_s,
                          shapes=shapes)[0]


def time_notebooks(pairs, *, reps: int = DEFAULT_REPS, seed: int | None = None, sandbox: bool = True,
                   timeout_s: float = 300.0, shapes: dict | None = None, lock_dir: str | None = None,
                   turn_limit_s: float | None = None) -> list[Timing]:
    """Time several submitted notebooks (one student's) against their references in one worker process.

    One process pays Python's, torch's and Triton's start-up once for all of them. A notebook whose
    stage fails ends that worker (a kernel that faulted may leave the GPU unusable to the process); the
    notebooks after it are timed in a fresh one, so one bad kernel never costs another notebook its time.

    Args:
        pairs: (submitted notebook, reference notebook) paths.
        reps, seed, sandbox: as :func:`time_notebook`; ``timeout_s`` is per notebook.
        shapes: notebook name -> a shape overriding its benchmark's (tests).
        lock_dir: the folder of the GPUs' lock files (:data:`.gpu_turn.LOCK_DIR`) when other workers
            may share the GPU: the worker runs kernels only in a turn the grader holds that GPU's lock
            for. ``timeout_s`` does not count the waits for a turn; one turn lasts at most
            ``turn_limit_s`` (default :data:`.gpu_turn.TURN_LIMIT_S`, scaled by ``reps`` over
            :data:`DEFAULT_REPS`).

    Returns:
        One :class:`Timing` per pair, in order; never raises for a learner's fault.
    """
    results: list[Timing | None] = [None] * len(pairs)
    dropped: dict[int, list[str]] = {}
    folder = tempfile.mkdtemp(prefix="attnlab-timing-")
    try:
        jobs = []
        for i, (submitted, reference) in enumerate(pairs):
            name = Path(submitted).stem
            bench = BENCHMARKS.get(name)
            shape = (shapes or {}).get(name)
            if bench is None:
                results[i] = Timing(name, Status.NOT_TIMED, f"{name} has no timing stage")
                continue
            if shape is None and not _gpu_here():
                results[i] = Timing(name, Status.NEEDS_GPU, "no GPU on this grader: speed is timed on a GPU grader "
                                    "only", unit=bench.unit)
                continue
            try:
                mine = kernel_source(cells_of(Path(submitted), bench.cells))
                ref = kernel_source(cells_of(Path(reference), bench.cells))
            except (LookupError, SyntaxError, ReachesPython) as exc:
                results[i] = Timing(name, Status.FAILED, f"could not read the kernels: {exc}", unit=bench.unit)
                continue
            dropped[i] = list(mine.dropped)
            job = Path(folder, f"job{i}")
            job.mkdir()
            for file, src in (("learner_kernels.py", mine.text), ("reference_kernels.py", ref.text)):
                Path(job, file).write_text(src)
            jobs.append({"index": i, "folder": job.name, "notebook": name, "reps": reps,
                         "seed": secrets.randbits(62) if seed is None else seed, "shape": dict(shape or bench.shape)})
        while jobs:
            done = _run_jobs(folder, jobs, sandbox, timeout_s * len(jobs), lock_dir, turn_limit_s)
            for job in jobs:
                i = job["index"]
                if str(i) in done:
                    results[i] = _read_result(done[str(i)], job, dropped[i])
            finished = [j for j in jobs if str(j["index"]) in done]
            pending = jobs[len(finished):]  # the worker does its jobs in order
            stopped = finished and results[finished[-1]["index"]].status is Status.FAILED
            if pending and not stopped:  # the worker died, or ran out of time, in the first of these
                first = pending.pop(0)
                status = Status.RETRY if done["grader"] else Status.FAILED
                results[first["index"]] = Timing(first["notebook"], status, done["error"],
                                                 unit=BENCHMARKS[first["notebook"]].unit,
                                                 dropped=dropped[first["index"]])
            jobs = pending
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


_FIELDS = {f.name for f in fields(Timing)} - {"notebook", "dropped"}


def _read_result(result, job: dict, dropped: list[str]) -> Timing:
    """A worker's result for ``job`` as a :class:`Timing`, its fields checked (a worker that wrote something
    else gets its job failed, not the pass)."""
    try:
        kept = {k: v for k, v in result.items() if k in _FIELDS}
        kept["status"] = Status(kept["status"])
        return Timing(job["notebook"], dropped=dropped, **kept)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return Timing(job["notebook"], Status.FAILED, f"the timing worker's result could not be read: {exc!r:.200}",
                      unit=BENCHMARKS[job["notebook"]].unit, dropped=dropped)


def _run_jobs(folder: str, jobs: list[dict], sandbox: bool, timeout_s: float, lock_dir: str | None,
              turn_limit_s: float | None) -> dict:
    """Run one worker on ``jobs``, serving its requests for the GPU's turn (:func:`.gpu_turn.serve`):
    {str(index): result fields} of the jobs it finished, ``"error"``: why it stopped early, when it did,
    and ``"grader"``: whether that was the grader's own trouble."""
    from .gpu_turn import TURN_LIMIT_S, Stopped, serve

    Path(folder, "config.json").write_text(json.dumps({"jobs": jobs, "channel": True}))
    out = Path(folder, "results.json")
    out.unlink(missing_ok=True)
    # -s and PYTHONSAFEPATH: no user site-packages, and not the working folder, on sys.path
    cmd = [sys.executable, "-s", "-m", "attnlab.grading.worker.timing", "--worker", folder]
    if sandbox:
        cmd = _sandboxed(cmd, folder)
    if turn_limit_s is None:
        turn_limit_s = TURN_LIMIT_S * max(1.0, (WARMUP + max(j["reps"] for j in jobs)) / (WARMUP + DEFAULT_REPS))
    tail = bytearray()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=folder,
                            env={**os.environ, "PYTHONSAFEPATH": "1"}, bufsize=0)
    with proc:
        t0 = time.monotonic()
        stopped = serve(proc, lock_dir, timeout_s, turn_limit_s, max_turns=2 * len(jobs), tail=tail)
        with contextlib.suppress(OSError):  # a worker that died has closed its end
            proc.stdin.close()
        try:  # it closed its stdout; without the sandbox, something of it may live on
            code = proc.wait(timeout=max(5.0, timeout_s - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            stopped = stopped or Stopped(f"the timing stage ran past {timeout_s:g} s")
    if stopped is None:
        lines = bytes(tail).decode(errors="replace").strip().splitlines()[-3:]
        stopped = Stopped(f"the timing worker ended with code {code}: " + " | ".join(lines))
    try:
        results = json.loads(out.read_text()) if out.exists() else {}
    except (OSError, ValueError):
        results = {}
    if not isinstance(results, dict):
        results = {}
    return {**results, "error": stopped.reason, "grader": stopped.grader}


def _gpu_here() -> bool:
    import torch

    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


def _sandboxed(cmd: list[str], folder: str) -> list[str]:
    """``cmd`` under bubblewrap, when the sandbox works, with ``folder`` (config, kernels, results) bound
    read-write as a kernel's socket folder is: the sandbox's scratch folder is a tmpfs of its own, where
    nothing of the host's folder is seen and nothing written comes back."""
    from .. import sandbox

    ok, _ = sandbox.check()
    if not ok:
        return cmd
    scratch = os.path.join(folder, "scratch")
    os.makedirs(scratch, exist_ok=True)
    return sandbox.wrap(cmd, scratch, folder)  # as a kernel: an account of its own under a root grader


# ------------------------------------------------------------------------------------- the worker
def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| over every element (a tuple of tensors counts as their concatenation)."""
    import torch

    if isinstance(out, tuple):
        out, ref = (torch.cat([t.flatten() for t in ts]) for ts in (out, ref))
    out, ref = out.float(), ref.float()
    if not bool(out.isfinite().all()):
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def _harness(name: str, shape: dict, kernels: tuple, device: str, dtype):
    """(make inputs, run the given launcher, expected outputs, work per call) for one notebook."""
    import torch
    import torch.nn.functional as F

    from ... import launch, launch_backward, launch_decode

    s = shape
    if name == "04_triton_softmax":
        def make(g):
            return (torch.randn(s["rows"], s["cols"], generator=g, device=device) * 3,)

        return (make, lambda x: launch.launch_softmax(kernels[0], x), lambda x: torch.softmax(x, -1),
                2 * s["rows"] * s["cols"] * 4, 1e-5)
    if name == "05_triton_flash":
        def make(g):
            return tuple(torch.randn(s["B"], s["H"], s["T"], s["D"], generator=g, device=device).to(dtype)
                         for _ in range(3))

        return (make, lambda q, k, v: launch.launch_flash_forward(kernels[0], q, k, v, causal=s["causal"])[0],
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"]),
                4 * s["B"] * s["H"] * s["T"] ** 2 * s["D"] / (2 if s["causal"] else 1), 2e-2)
    if name == "07_triton_backward":
        def make(g):
            q, k, v, do = (torch.randn(s["B"], s["H"], s["T"], s["D"], generator=g, device=device).to(dtype)
                           for _ in range(4))
            o, lse = launch_backward.reference_forward(q, k, v, causal=s["causal"])
            return q, k, v, o, lse, do

        def expected(q, k, v, o, lse, do):
            qkv = [t.detach().requires_grad_() for t in (q, k, v)]
            ref = F.scaled_dot_product_attention(*qkv, is_causal=s["causal"])
            return tuple(torch.autograd.grad(ref, qkv, do))

        def run(q, k, v, o, lse, do):  # (dQ, dK, dV): the launcher's only GPU work is the kernels
            return tuple(launch_backward.launch_flash_backward(kernels, q, k, v, o, lse, do, causal=s["causal"]))

        return (make, run, expected, 2.5 * 4 * s["B"] * s["H"] * s["T"] ** 2 * s["D"] / (2 if s["causal"] else 1),
                2e-2)
    if name == "08_flash_decoding":
        def make(g):
            q = torch.randn(s["B"], s["H_q"], 1, s["D"], generator=g, device=device).to(dtype)
            kc, vc = (torch.randn(s["B"], s["H_kv"], s["T"], s["D"], generator=g, device=device).to(dtype)
                      for _ in range(2))
            return q, kc, vc, torch.full((s["B"],), s["T"], dtype=torch.int32, device=device)

        def expected(q, kc, vc, lens):
            rep = s["H_q"] // s["H_kv"]
            return F.scaled_dot_product_attention(q, kc.repeat_interleave(rep, 1), vc.repeat_interleave(rep, 1))

        return (make, lambda q, kc, vc, lens: launch_decode.launch_flash_decode(*kernels, q, kc, vc, lens,
                                                                               causal=s["causal"])[0],
                expected, 2 * s["B"] * s["H_kv"] * s["T"] * s["D"] * 2, 2e-2)
    raise KeyError(name)


def _time_one(run, inputs, flush, device: str, names: tuple[str, ...]) -> tuple[float, object]:
    """One call of the launcher ``run``: the GPU time of the kernels named ``names`` (milliseconds,
    from CUDA's activity records: the launcher's Python and its output allocations are not the
    kernel's work), after an L2 flush; and the call's output. Without a GPU: the call's wall time.

    Raises:
        RuntimeError: a kernel of ``names`` never ran on the GPU.
    """
    import torch

    from ...launch import checking

    if device != "cuda":
        t0 = time.perf_counter()
        with checking():
            out = run(*inputs)
        return (time.perf_counter() - t0) * 1e3, out
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    flush.zero_()
    torch.cuda.synchronize()
    # checking(): outputs start as NaN, so an element never written fails the check (the fills are
    # kernels of their own, not counted below)
    with profile(activities=[ProfilerActivity.CUDA]) as prof, checking():
        out = run(*inputs)
        torch.cuda.synchronize()
    spans = {name: 0.0 for name in names}
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            for name in names:
                if event.name == name or event.name.startswith(name + "_"):
                    spans[name] += event.time_range.elapsed_us() / 1e3
    missing = [name for name, ms in spans.items() if ms == 0.0]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} never ran on the GPU")
    return sum(spans.values()), out


def run_worker(folder: Path) -> dict:
    """The worker's whole job (in a fresh process): for each job of ``folder/config.json``, load both
    kernel modules, time, check, report. Results go to ``folder/results.json`` ({index: fields of a
    :class:`Timing`}) after every job, so a worker that dies keeps what it finished; it stops after a
    job that failed (a faulted kernel may leave the GPU unusable to this process).

    Returns:
        The results written.
    """
    start = time.perf_counter()
    config = json.loads(Path(folder, "config.json").read_text())
    jobs = config["jobs"]
    from ...core import device as device_

    rt = device_.init(verbose=False)
    import torch

    from ... import gpu_compile
    from .gpu_turn import Channel

    channel = Channel.open(_gpu_name(torch) if rt.device == "cuda" else "cpu") if config.get("channel") else None

    if rt.device == "cuda":  # the autograder judged the other GPUs; here only this one's compile counts
        gpu_compile.TARGETS = ()
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):  # CUPTI's start-up, paid outside the GPU's turn
            pass
    results: dict[str, dict] = {}
    ready_s = time.perf_counter() - start
    for job in jobs:
        t0 = time.perf_counter()
        result = _run_job(Path(folder, job["folder"]), job, rt.device, torch, channel)
        result["phases"] = {**result.get("phases", {}), "worker_start_s": round(ready_s, 2),
                            "job_s": round(time.perf_counter() - t0, 2)}
        ready_s = 0.0  # paid once, by the first job
        results[str(job["index"])] = result
        Path(folder, "results.json").write_text(json.dumps(results))
        if result["status"] == Status.FAILED.value:
            break
    return results


def _gpu_name(torch) -> str:
    """This process's GPU by its UUID (what the GPU's lock is named after), in letters, digits and '-'."""
    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    return "".join(c for c in uuid if c.isalnum() or c == "-") or "cuda"


def _run_job(folder: Path, config: dict, device: str, torch, channel) -> dict:
    """One notebook's stage in this worker: the fields of a :class:`Timing`. The inputs, the checked
    warm-up and the timed repetitions run in the GPU's turn (``channel``, a :class:`.gpu_turn.Channel`,
    or None: the GPU is this worker's alone); the compiles come before, outside it (they launch nothing
    but the launcher's own buffer fills, a zeroed float32 accumulator at most: tens of microseconds)."""
    import triton

    from ... import gpu_compile

    def gpu_turn():
        return channel.turn() if channel is not None else contextlib.nullcontext(0.0)

    name, shape = config["notebook"], config["shape"]
    bench = BENCHMARKS[name]
    dtype = getattr(torch, shape.get("dtype", "float32")) if device == "cuda" else torch.float32
    base = {"notebook": name, "unit": bench.unit, "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
            "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]}}
    phases = {}

    def finish(**fields) -> dict:
        return {**base, **fields, "phases": phases}

    sides = {}
    for side in ("learner", "reference"):
        try:
            module = _load(Path(folder, f"{side}_kernels.py"), f"{side}_kernels_{folder.name}")
            sides[side] = _harness(name, shape, tuple(getattr(module, c) for c in bench.cells), device, dtype)
        except Exception as exc:  # noqa: BLE001  (a learner's module that does not load: reported, not raised)
            return finish(status="failed", message=f"{side} kernels: {type(exc).__name__}: {exc}")
    gen = torch.Generator(device=device)
    waited = 0.0
    if device == "cuda":  # compile both sides while another worker may be timing
        t0 = time.perf_counter()
        with gpu_turn() as waited:  # the launch's inputs, for their types: made on the GPU, in a turn
            inputs = sides["learner"][0](gen.manual_seed(config["seed"]))
            torch.cuda.synchronize()
        for side in ("learner", "reference"):
            try:
                with gpu_compile.compile_only():
                    sides[side][1](*inputs)
            except Exception as exc:  # noqa: BLE001
                return finish(status="failed", message=f"{side} kernels did not compile: {type(exc).__name__}: "
                                                       f"{str(exc)[:300]}")
        del inputs
        torch.cuda.empty_cache()  # give the inputs' memory back while other workers have the GPU
        phases["compile_s"] = round(time.perf_counter() - t0 - waited, 2)
    with gpu_turn() as waited_again:
        phases["gpu_wait_s"] = round(waited + waited_again, 2)
        return _time_sides(sides, config, device, torch, bench, phases, finish)


def _time_sides(sides: dict, config: dict, device: str, torch, bench: Benchmark, phases: dict, finish) -> dict:
    """The checked warm-up and the timed repetitions of both sides (in the GPU's turn)."""
    import statistics

    flush = torch.empty(256 * 2 ** 20, dtype=torch.int8, device=device) if device == "cuda" else None
    times = {"learner": [], "reference": []}
    gen = torch.Generator(device=device)
    t0 = time.perf_counter()
    for rep in range(WARMUP + config["reps"]):
        if rep == WARMUP:
            phases["warmup_s"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
        gen.manual_seed((config["seed"] + rep * 0x9E3779B97F4A7C15) % 2 ** 63)  # a new draw per repetition
        inputs = sides["learner"][0](gen)
        target = None
        # The learner's kernels run first, while no right answer for these inputs exists anywhere in the
        # GPU's memory (the caching allocator never clears freed blocks: a kernel reading past its
        # buffers could find a result made before it); the target is made from untouched inputs after.
        for side in ("learner", "reference"):
            make, run, expected, work, tol = sides[side]
            try:
                ms, out = _time_one(run, tuple(t.clone() for t in inputs), flush, device, bench.cells)
            except Exception as exc:  # noqa: BLE001
                return finish(status="failed", message=f"{side} kernels failed on repetition {rep}: "
                                                       f"{type(exc).__name__}: {str(exc)[:300]}")
            if target is None:
                target = expected(*inputs)
            err = _relative_error(out, target)
            del out
            if not err <= tol:
                what = "the learner's" if side == "learner" else "the reference"
                return finish(status="wrong", message=f"{what} output of repetition {rep} is wrong (relative "
                                                      f"error {err:.2g} > {tol:g}): not timed", reps=rep)
            if rep >= WARMUP:
                times[side].append(ms)
        del inputs, target
    phases["reps_s"] = round(time.perf_counter() - t0, 2)
    mine, ref = (statistics.median(times[s]) for s in ("learner", "reference"))
    work = sides["learner"][3]
    rate = work / (mine * 1e-3) / (1e12 if bench.unit == "TFLOP/s" else 1e9)
    cv = statistics.pstdev(times["learner"]) / statistics.mean(times["learner"])
    if device != "cuda":
        return finish(status="needs GPU timing", reps=config["reps"],
                      message="no GPU here: every repetition was checked, nothing is timed")
    return finish(status="timed", ratio=ref / mine, learner_ms=mine, reference_ms=ref, rate=rate, cv=cv,
                  reps=config["reps"], message=f"{ref / mine:.2f}x the reference kernel; {rate:.1f} {bench.unit}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab.grading.worker.timing", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", nargs="?", type=Path, help="a submitted NN_name.ipynb")
    parser.add_argument("--reference", type=Path, help="the instructor's notebook (default: source/<assignment>/)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--no-sandbox", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker)
        return 0
    if args.notebook is None:
        parser.error("a notebook is needed")
    from ..course import assignment_of

    reference = args.reference or Path("source", assignment_of(args.notebook.stem), args.notebook.name)
    timing = time_notebook(args.notebook, reference, reps=args.reps, seed=args.seed, sandbox=not args.no_sandbox)
    print(f"{timing.notebook}: {timing.status.value}: {timing.message}")
    if args.json:
        args.json.write_text(json.dumps(timing.to_json(), indent=1))
    return 0 if timing.status in (Status.TIMED, Status.NEEDS_GPU) else 1


if __name__ == "__main__":
    sys.exit(main())
