"""The timing stage (attnlab.grading.worker.timing) on a CPU: what is timed is the kernels' definitions and
nothing else of the notebook; every repetition is checked; no GPU means "needs GPU timing".
The speeds themselves are measured on the H200 (notes/gpu/), never asserted here."""

from __future__ import annotations

import fcntl
import threading
import time

import nbformat
import pytest

from attnlab.grading.worker import timing

from attnlab.grading.worker.gpu_turn import lock_file

from .conftest import ROOT
from .interpreter import interpreter_only
from .test_bug_hints import solution
from .test_gpu_turn import waited_for

SOFTMAX = ROOT / "source" / "attention_kernels" / "04_triton_softmax.ipynb"
SMALL = {"rows": 6, "cols": 37}


def _with_cell(tmp_path, edit):
    """A copy of the instructor's notebook 04 whose kernel cell went through ``edit``."""
    nb = nbformat.read(str(SOFTMAX), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "_softmax_kernel")
    cell.source = edit(cell.source)
    path = tmp_path / SOFTMAX.name
    nbformat.write(nb, str(path))
    return path


def test_only_kernel_definitions_are_kept():
    cell = '''import os
import triton
SCALE = 1.5
LOG2E = tl.constexpr(1.4426950408889634)
os.environ["X"] = "1"
_softmax_kernel.add_pre_run_hook(lambda *a, **k: None)
@triton.jit
def helper(x, N: tl.constexpr):
    return x * SCALE
@triton.jit(do_not_specialize=["n"])
def kernel(p, n, BLOCK: tl.constexpr = 16):
    helper(p, BLOCK)
@some.decorator
@triton.jit
def wrapped(p):
    pass
@triton.jit
def side_effect(p, q=print("defined")):
    pass
@triton.jit
def annotated(p: os.system("x")):
    pass
class Anything:
    pass
'''
    src = timing.kernel_source([cell])
    assert src.defined == ("SCALE", "LOG2E", "helper", "kernel")
    assert len(src.dropped) == 6, src.dropped  # os.environ, the hook, 3 defs that run code, the class
    assert "add_pre_run_hook" not in src.text and "os.environ" not in src.text and "print" not in src.text
    compile(src.text, "kernels.py", "exec")


def test_reference_kernel_checked_on_every_repetition_and_not_timed_on_a_cpu():
    result = timing.time_notebook(SOFTMAX, SOFTMAX, reps=2, seed=3, sandbox=False, shape=SMALL)
    assert result.status is timing.Status.NEEDS_GPU, result
    assert result.ratio is None and result.dropped == []


def test_the_sandboxed_worker_reads_its_jobs_and_hands_back_its_results():
    """As on a GPU grader: the worker under bubblewrap, as a kernel account (its scratch folder is a
    tmpfs of the sandbox, so the jobs and results travel through a folder bound for them)."""
    from attnlab.grading import sandbox

    ok, why = sandbox.check()
    if not ok:
        pytest.skip(f"no sandbox here: {why}")
    result = timing.time_notebook(SOFTMAX, SOFTMAX, reps=1, seed=3, sandbox=True, shape=SMALL)
    assert result.status is timing.Status.NEEDS_GPU, result


_STORE = "    tl.store(output_ptr + row * output_row_stride + cols, y.to(output_ptr.dtype.element_ty), mask=in_row)\n"
_HOOK = """

def _softmax_hook(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, *args, **kwargs):
    import torch
    output_ptr.copy_(torch.softmax(input_ptr.float(), -1).to(output_ptr.dtype))


_softmax_kernel.add_pre_run_hook(_softmax_hook)
"""


@pytest.mark.parametrize("edit, status", [
    # a wrong kernel: not timed
    (lambda s: s.replace("y = num / tl.sum(num, axis=0)", "y = num"), timing.Status.WRONG),
    # right numbers in the notebook from a pre-run hook attached at module level (issue 30's trick):
    # the hook is not part of what is timed, so the kernel's own output (nothing) is checked
    (lambda s: s.replace(_STORE, "    pass\n") + _HOOK, timing.Status.WRONG),
    # a kernel that does not compile or run: failed, with the reason
    (lambda s: s.replace("y = num / tl.sum(num, axis=0)", "y = num / undefined_name"), timing.Status.FAILED),
], ids=["wrong", "hook-dropped", "broken"])
def test_a_kernel_that_is_wrong_is_not_timed(tmp_path, edit, status):
    path = _with_cell(tmp_path, edit)
    assert "y = num / tl.sum(num, axis=0)" not in path.read_text() or "_softmax_hook" in path.read_text()
    result = timing.time_notebook(path, SOFTMAX, reps=2, seed=3, sandbox=False, shape=SMALL)
    assert result.status is status, result
    assert result.message


def test_a_notebook_without_a_stage():
    result = timing.time_notebook(ROOT / "source" / "attention_kernels" / "01_online_softmax.ipynb", SOFTMAX)
    assert result.status is timing.Status.NOT_TIMED


#: The timer's known bypass families (GPU MODE's own security notes and issues), each written as a
#: learner's cell would write it around the right kernel. None may reach the timed process: only the
#: kernel's definition does, so each is timed as the honest kernel (here: checked, "needs GPU timing").
_EXPLOITS = {
    "timer-patched": "import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 1e-6\n",
    "profiler-patched": "import torch.profiler\ntorch.profiler.profile = None\n",
    "results-cached": ("import functools\n_orig = _softmax_kernel\n"
                       "_softmax_kernel = functools.lru_cache(maxsize=None)(_orig)\n"),
    "first-call-only": ("_calls = []\nclass _Once:\n    def __getitem__(self, grid):\n        _calls.append(1)\n"
                        "        return (lambda *a, **k: None) if len(_calls) > 1 else _orig[grid]\n"
                        "_orig = _softmax_kernel\n_softmax_kernel = _Once()\n"),
    "other-stream": "import torch\n_s = torch.cuda.Stream() if torch.cuda.is_available() else None\n",
    "warmup-detected": "import sys\n_WARM = 'attnlab.grading.worker.timing' in sys.modules\n",
    "reference-returned": ("import attnlab.launch as _l\n_l.launch_softmax = lambda k, x: __import__('torch')"
                           ".softmax(x, -1)\n"),
}


def test_a_kernel_that_reaches_python_is_refused_before_anything_of_it_runs(tmp_path):
    """Triton's compiler calls what a kernel names while it compiles: a kernel naming Python's machinery
    (here through triton.language's own imports) would run code in the timing worker. It is refused when
    the kernels are read, and its code never runs."""
    marker = tmp_path / "ran"
    payload = f"    tl.core.builtins.exec(\"open({str(marker)!r}, 'w')\", {{}})\n"
    path = _with_cell(tmp_path, lambda s: s.replace(_STORE, payload + _STORE))
    result = timing.time_notebook(path, SOFTMAX, reps=1, seed=3, sandbox=False, shape=SMALL)
    assert result.status is timing.Status.FAILED and "tl.core.builtins" in result.message, result
    assert not marker.exists()


#: Kernel bodies that made Triton's compiler run Python (red teams, 2026-12-04), each refused when read.
_REACHES_PYTHON = {
    "builtins-module": "tl.core.builtins.exec('1', {})",
    "helper-that-evals": "tl.str_to_ty(\"tensordesc<fp32[16],__import__('os').getpid()>\".value, None)",
    "scope-of-a-computed-value": "(tl.sum if 1 else tl.max).get_capture_scope().get('x'.value)",
    "scope-through-a-tuple": "(tl.sum,)[0].get_capture_scope()",
    "python-name": "exec('1')",
    "module-as-a-value": "tl.constexpr(tl.core)",
    "attribute-of-a-kernel": "_softmax_kernel.fn",
    "jit-runtime": "triton.runtime.driver",
    "builtin-assigned-later": "getattr(getattr(getattr(tl, 'core'), 'builtins'), 'exec')('1')\n    getattr = 0",
}


@pytest.mark.parametrize("family", sorted(_REACHES_PYTHON))
def test_every_way_of_reaching_python_from_a_kernel_body_is_refused(family):
    body = "    " + _REACHES_PYTHON[family] + "\n"
    cell = "@triton.jit\ndef k(X):\n" + body + "    tl.store(X, 1.0)\n\n\n@triton.jit\ndef _softmax_kernel(X):\n    pass\n"
    with pytest.raises(timing.ReachesPython):
        timing.kernel_source([cell])


def test_the_instructors_kernels_and_their_honest_variants_are_not_refused(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from timing_ranking import VARIANTS, write_variant

    for nb, variants in VARIANTS.items():
        for name, cell, edit in variants:
            path = write_variant(nb, name, cell, edit, tmp_path / nb)
            timing.kernel_source(timing.cells_of(path, timing.BENCHMARKS[path.stem].cells))


@pytest.mark.parametrize("family", sorted(_EXPLOITS))
def test_timer_bypass_families_never_reach_the_timed_process(tmp_path, family):
    path = _with_cell(tmp_path, lambda s: s + "\n\n" + _EXPLOITS[family])
    cells = timing.cells_of(path, ("_softmax_kernel",))
    src = timing.kernel_source(cells)
    assert src.dropped, family  # every statement of the trick is left out ...
    assert src.defined == ("_softmax_kernel",)  # ... and the kernel's definition is all that is kept
    result = timing.time_notebook(path, SOFTMAX, reps=1, seed=4, sandbox=False, shape=SMALL)
    assert result.status is timing.Status.NEEDS_GPU, result


def test_a_students_notebooks_share_one_worker_and_a_failure_ends_only_its_own(tmp_path):
    broken = _with_cell(tmp_path, lambda s: s.replace("y = num / tl.sum(num, axis=0)", "y = num / undefined_name"))
    shapes = {SOFTMAX.stem: SMALL}
    first, second = timing.time_notebooks([(SOFTMAX, SOFTMAX), (SOFTMAX, SOFTMAX)], reps=1, seed=3, sandbox=False,
                                          shapes=shapes)
    assert first.status is second.status is timing.Status.NEEDS_GPU, (first, second)
    assert first.phases["worker_start_s"] > 0 and second.phases["worker_start_s"] == 0  # one worker for both
    failed, after = timing.time_notebooks([(broken, SOFTMAX), (SOFTMAX, SOFTMAX)], reps=1, seed=3, sandbox=False,
                                          shapes=shapes)
    assert failed.status is timing.Status.FAILED and "undefined_name" in failed.message, failed
    assert after.status is timing.Status.NEEDS_GPU and after.phases["worker_start_s"] > 0, after  # a fresh worker


@interpreter_only
def test_compile_only_runs_no_kernel():
    """What the worker's compile pass relies on: inside ``compile_only`` a launcher's kernels are compiled
    (here: judged by the gate) and never run, so its output is left as allocated (NaN on a CPU)."""
    import torch

    from attnlab import gpu_compile, launch

    kernel = solution("04_triton_softmax", "_softmax_kernel")
    x = torch.randn(4, 37)
    with gpu_compile.compile_only():
        y = launch.launch_softmax(kernel, x)
    assert torch.isnan(y).all()
    assert torch.allclose(launch.launch_softmax(kernel, x), torch.softmax(x, -1), atol=1e-6)


def _release_once_waited_for(lock, holder, hold_s: float):
    """Release ``holder``'s lock ``hold_s`` after someone is seen waiting for it, or after 120 s."""
    try:
        deadline = time.monotonic() + 120
        while not waited_for(lock) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(hold_s)
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)


def test_the_worker_runs_its_repetitions_only_in_the_gpus_turn(tmp_path):
    """Another worker has the GPU (its lock held here): the worker, sandboxed when bubblewrap works here
    as in grading, waits for the grader to give it the turn before it runs a kernel, and says how long it
    waited (that the checked calls run inside the turn: the next test; that waits are not charged:
    tests/test_gpu_turn.py)."""
    from attnlab.grading import sandbox

    lock = lock_file(str(tmp_path), "cpu")  # a worker without a GPU asks for the turn of "cpu"
    with open(lock, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        releaser = threading.Thread(target=_release_once_waited_for, args=(lock, holder, 2.0))
        releaser.start()
        result, = timing.time_notebooks([(SOFTMAX, SOFTMAX)], reps=1, seed=3, sandbox=sandbox.check()[0],
                                        shapes={SOFTMAX.stem: SMALL}, lock_dir=str(tmp_path))
        releaser.join()
    assert result.status is timing.Status.NEEDS_GPU, result
    assert result.phases["gpu_wait_s"] >= 1.5, result.phases


def test_a_kernel_that_keeps_the_gpu_past_its_turn_is_stopped_and_frees_it(tmp_path):
    """A kernel that runs (almost) forever (on the timed shape only, it could pass every test) is stopped at
    the turn's limit, not at the end of its worker's budget, and the GPU is free again. Since only the
    checked calls run it, this also shows that they run inside the turn."""
    spin = "    i = 0\n    while i < 1000000000:\n        i += 1\n"
    path = _with_cell(tmp_path, lambda s: s.replace(_STORE, spin + _STORE))
    t0 = time.monotonic()
    result, = timing.time_notebooks([(path, SOFTMAX)], reps=1, seed=3, sandbox=False, shapes={SOFTMAX.stem: SMALL},
                                    lock_dir=str(tmp_path), turn_limit_s=2.0)
    assert result.status is timing.Status.FAILED and "more than 2 s in one turn" in result.message, result
    assert time.monotonic() - t0 < 120
    with open(lock_file(str(tmp_path), "cpu"), "rb") as f:  # free again
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
