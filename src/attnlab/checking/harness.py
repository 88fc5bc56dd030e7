"""The one public harness under the kernel checkers (:mod:`attnlab.verify`, :mod:`attnlab.verify_backward`,
:mod:`attnlab.verify_decode`, :mod:`attnlab.verify_tuning`).

Every check of learner code goes through :func:`call_learner` (the time limit, the grader's guard after the
call, the dispatcher's and Triton's integrity). A check of a Triton kernel takes the same steps in the same
order, written once in :func:`check_kernel`:

1. the checker builds seeded inputs (followed in memory by NaN: :func:`attnlab.checking.poisoned.with_tail`)
   and NaN-poisoned outputs followed by guard values (:func:`attnlab.checking.poisoned.guarded`), and picks
   the device (:func:`kernel_device`);
2. :func:`check_kernel` copies the inputs, launches through the course's launcher under :func:`call_learner`
   (with the work ledger recording every access when the case runs under the interpreter), then checks, in
   this order: the guard values after every output (a store past the end), the inputs unchanged, the
   reads and races (:mod:`attnlab.checking.loads`), the values (the checker's comparison, with its
   diagnoses), and last the work model (:mod:`attnlab.checking.work_models`): a wrong result's diagnosis
   names a bug better than a method rule would.

The checkers keep what is theirs: the case, the references, the messages and the diagnoses.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from .. import kernel_source, launch
from ..core import device as device_module
from ..core import review
from ..checks import call_limit_s, time_limit
from ..grading.kernel import guard
from . import integrity
from .loads import available as loads_available
from .loads import interpreter_internals, record
from .poisoned import GUARD
from .probe import MethodProbe

__all__ = ["call_learner", "triton_intact", "kernel_device", "flag_internals", "CPU_CASE_ELEMENTS",
           "Tail", "KernelCheck", "check_kernel", "check_tail", "check_inputs_kept", "GUARD"]

#: Learner functions that already ran out of time: later checks fail at once instead of waiting again.
_HUNG: dict[int, object] = {}


def call_learner(fn, what: str, *args, _key=None, _probe: MethodProbe | None = None,
                 _hooked: MethodProbe | None = None, **kwargs):
    """Call learner code under :func:`attnlab.checks.call_limit_s`, then undo global changes it made.

    ``_key`` is the learner's object when ``fn`` is a course launcher around it (a kernel): a
    timeout marks that object as hung, so later checks of it fail at once, and checks of another
    kernel still run. Gradient mode and the default dtype are put back as they were; while
    autograding, the grader's guard (:mod:`attnlab.grading.kernel.guard`) also restores the references and
    helpers the checks use, so the comparison that follows uses the course's code, not a replacement.

    Before and after the call, :func:`attnlab.checking.integrity.check` refuses to go on while torch's
    operators are altered (a ``torch.library`` kernel, an active mode), and before it :func:`triton_intact`
    refuses to go on while Triton's own code holds a notebook's (kernels themselves are launched rebuilt
    from their source: :mod:`attnlab.kernel_source`). With ``_probe`` (a
    :class:`attnlab.checking.probe.MethodProbe`) the call runs under it, and a broken method rule fails the
    check after the call; a result the probe never saw being computed is flagged for review.
    ``_hooked`` is a probe that ``fn`` attaches and detaches itself (around one autograd node):
    it is detached here if the call left it attached, then judged like ``_probe``.
    """
    key = fn if _key is None else _key
    if id(key) in _HUNG:
        raise TimeoutError(f"{what} is not run again: it already timed out in an earlier check")
    integrity.check(what)
    triton_intact(what)
    if _probe is not None and not _probe.decides:
        _probe = None
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    tampered: list[str] = []
    try:
        # launch.checking(): launchers poison outputs and check values, as a comparison needs
        with time_limit(call_limit_s(), what), kernel_source.checking(), launch.checking():
            if _probe is None:
                result = fn(*args, **kwargs)
            else:
                depth = torch._C._len_torch_dispatch_stack()
                with _probe:
                    result = fn(*args, **kwargs)
                    if torch._C._len_torch_dispatch_stack() != depth + 1:
                        tampered.append("the dispatch mode stack was changed during the call")
    except TimeoutError:
        _HUNG[id(key)] = key
        raise
    finally:
        if _hooked is not None:
            _hooked.detach()  # the learner's backward raised before the node's post-hook ran
        tampered += integrity.problems()  # before the guard, which silently pops modes left active
        guard.after_call()  # first of the repairs: it reports what the call changed
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
    if tampered:
        integrity.check(what)  # flags and raises with its own message while the change persists
        review.flag(f"torch was tampered with while checking {what}: {'; '.join(tampered)}")
        raise AssertionError(f"{what}: {'; '.join(tampered)}. The checks cannot trust a result computed "
                             f"while torch's dispatch is altered.")
    _probe = _probe or _hooked
    if _probe is None:
        return result
    _probe.verdict()
    try:
        unseen = _probe.unseen(result)
        internal = _probe.internal_error
    except Exception as error:  # noqa: BLE001 (the probe's own failure: reviewed, never a pass or a crash)
        unseen, internal = [], f"{type(error).__name__} while reading the method probe: {error}"[:300]
    if internal:
        review.flag(f"{what}: the method probe failed inside ({internal}); the method could not be checked "
                    f"past that point")
    if unseen:
        review.flag(f"{what}: returned tensors of shapes {unseen} that no torch operation "
                    f"made while it ran, or made from or overwritten with data from elsewhere (NumPy, another "
                    f"thread, dispatch switched off?): the method could not be checked")
    return result


def triton_intact(what: str) -> None:
    """Refuse to launch anything while Triton's own code is altered: a function a notebook put into Triton's
    language, runtime or compiler runs while the kernel is launched, compiled or interpreted
    (:func:`attnlab.kernel_source.triton_patches`); reported for review too."""
    patched = kernel_source.triton_patches()
    if patched:
        more = f" and {len(patched) - 1} more" if len(patched) > 1 else ""
        review.flag(f"{what}: Triton's code had been replaced ({patched[0]}{more})")
        raise AssertionError(f"{what}: Triton's own code was replaced by code from the notebook ({patched[0]}{more}). "
                             f"Triton runs it while a kernel is launched, so nothing can be graded while it is there: "
                             f"remove the assignment to Triton's attributes and run the notebook again.")


#: Score (or, for 04, input) elements of the largest CPU-sized case. A float32 case up to this size is
#: a CPU-sized case: it runs through Triton's interpreter on the CPU on every machine, a GPU machine
#: included, so its loads are accounted and its result is the one a laptop gets. Larger cases and
#: 16-bit ones are the GPU cases (run on a GPU only). Every CPU-sized case of the notebooks is below
#: 2**16; the smallest float32 GPU case is above 2**20.
CPU_CASE_ELEMENTS = 2 ** 18


def kernel_device(device: str | None, *, dtype, elements: int) -> tuple[str, bool]:
    """The device for a Triton check and whether its loads are accounted (under the interpreter).

    ``device=None`` picks the CPU for a CPU-sized case (float32, at most :data:`CPU_CASE_ELEMENTS`
    ``elements``) and on a machine without a GPU, the GPU otherwise. A case on the CPU runs through
    Triton's interpreter, on a GPU machine too (:func:`attnlab.core.device.interpreted_twin`).

    Raises:
        RuntimeError: interpreter mode is needed but cannot work in this process (see
            :func:`attnlab.core.device.require_interpreter`).
        ValueError: a CUDA device under the interpreter, where the checks account loads on the CPU.
    """
    rt = device_module.runtime()  # through the module: a test that fakes a GPU machine replaces it there
    if device is None:
        small = dtype == torch.float32 and elements <= CPU_CASE_ELEMENTS
        device = "cpu" if rt.interpret or small else rt.device
    if torch.device(device).type != "cpu":
        if rt.interpret:
            raise ValueError(f"device={device!r}: under Triton's interpreter the kernel checks run on the CPU "
                             f"(device='cpu'); GPU cases run on a GPU")
        return device, False
    if rt.interpret:
        device_module.require_interpreter()
    if not loads_available():
        review.flag("this Triton's interpreter cannot be instrumented, so the loads of the kernel (the method of "
                    "notebooks 04, 05 and 08) are not checked; only its results are")
        return device, False
    return device, True


#: Kernels already scanned (and reported if need be): once per kernel, not once per check.
_SCANNED: dict[int, object] = {}


def flag_internals(kernel, what: str, notebook: str) -> None:
    """Report a kernel that mentions Triton's interpreter internals: its loads may bypass the accounting."""
    if _SCANNED.get(id(kernel)) is kernel or not hasattr(kernel, "fn"):
        return
    _SCANNED[id(kernel)] = kernel
    hits = interpreter_internals(kernel)
    if hits:
        review.flag(f"{what} refers to Triton's interpreter internals ({', '.join(hits)}): the load accounting of "
                    f"notebook {notebook} cannot vouch for how it reads memory")


# ------------------------------------------------------------------------------ the kernel-check skeleton
@dataclass
class Tail:
    """The guard values after one output: ``buf[n:]`` must still hold :data:`GUARD` after the launch.

    ``message`` is the whole error (or a function giving it, called only on a failure: a diagnosis
    may launch the kernel again)."""

    buf: torch.Tensor
    n: int
    message: str | Callable[[], str]


def check_tail(tail: Tail) -> None:
    """Raise AssertionError with ``tail.message`` when a guard value after the output changed."""
    if (tail.buf[tail.n:] != GUARD).any():
        raise AssertionError(tail.message() if callable(tail.message) else tail.message)


#: The message of an input the kernel wrote into; formatted with ``what``, ``case`` and ``name``.
INPUT_WRITTEN = "{what} [{case}]: wrote into its input {name}: a kernel may only store to its outputs"


def check_inputs_kept(before: Sequence[torch.Tensor], after: Sequence[torch.Tensor], names: Sequence[str], *,
                      what: str, case, message: str = INPUT_WRITTEN) -> None:
    """Raise AssertionError naming the first input the kernel changed in any bit.

    The compare is exact: shape, dtype and every element's bits (so -0.0 against 0.0, an infinity
    against the largest finite value, a NaN against 0 all differ); a NaN is equal to a NaN in the
    same place, whatever its payload. No tolerance: a kernel that writes tiny changes into its
    inputs fails here.
    """
    for name, b, a in zip(names, before, after):
        if not _same_bits(b, a):
            raise AssertionError(message.format(what=what, case=case, name=name))


#: Integer dtypes of a float's width, to compare float tensors bit for bit.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(b: torch.Tensor, a: torch.Tensor) -> bool:
    """Whether two tensors are equal bit for bit, a NaN matching any NaN in the same place."""
    if b.shape != a.shape or b.dtype != a.dtype:
        return False
    if not (b.is_floating_point() or b.is_complex()):
        return torch.equal(b, a.to(b.device))
    a = a.to(b.device)
    if b.is_complex():
        b, a = torch.view_as_real(b.resolve_conj()), torch.view_as_real(a.resolve_conj())
    nan = b.isnan() & a.isnan()
    bits = _BITS[b.element_size()]
    same = b.contiguous().view(bits) == a.contiguous().view(bits)
    return bool((same | nan).all())


@dataclass
class KernelCheck:
    """One check of learner kernels through a course launcher; :func:`check_kernel` runs it.

    Attributes:
        what: the kernel's name in messages (``"_flash_fwd_kernel"``); ``case``: the case's
            :class:`attnlab.checks.Case`; ``key``: the learner's object a timeout marks as hung;
            ``call_name``: the name :func:`call_learner` gives the call, when not ``what``.
        launch, args, kwargs: the launcher called under :func:`call_learner` as ``launch(*args, **kwargs)``.
        device: where it runs; ``accounted``: whether the launch is recorded in the work ledger
            (both from :func:`kernel_device`); ``buffers``: name -> whole buffer the ledger watches.
        tails: the guard values to check after the launch (:class:`Tail`), in order.
        written_outside: instead of ``tails``, a check of its own (04's padded rows).
        inputs: name -> input tensor the kernel must leave unchanged (copied before the launch);
            ``input_written``: the message (:data:`INPUT_WRITTEN`).
        internals: (kernel, name, notebook) scanned for the interpreter's internals when accounted.
        reads: ``reads(ledger, where)``: the load and race rules (accounted cases only).
        compare: ``compare()``: the values against the reference, with the diagnoses.
        work: ``work(ledger, where)``: the cost model, after the values (accounted cases only).
    """

    what: str
    case: Any
    launch: Callable
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    key: Any = None
    device: str = "cpu"
    accounted: bool = False
    buffers: Mapping[str, torch.Tensor] = field(default_factory=dict)
    tails: Sequence[Tail] = ()
    written_outside: Callable[[], None] | None = None
    inputs: Mapping[str, torch.Tensor] = field(default_factory=dict)
    input_written: str = INPUT_WRITTEN
    call_name: str | None = None
    internals: Sequence[tuple] = ()
    reads: Callable | None = None
    compare: Callable[[], None] | None = None
    work: Callable | None = None

    @property
    def where(self) -> str:
        return f"{self.what} [{self.case}]"


def check_kernel(check: KernelCheck):
    """Launch, then check the tails, the inputs, the reads, the values and the work, in this order.

    Returns the work ledger (None when the case is not accounted) and the result of the launcher.

    Raises:
        AssertionError: from the first step that fails (its message names the case and the rule).
    """
    names = tuple(check.inputs)
    before = tuple(t.clone() for t in check.inputs.values())
    with record(check.buffers) if check.accounted else contextlib.nullcontext() as ledger:
        result = call_learner(check.launch, check.call_name or check.what, *check.args, _key=check.key, **check.kwargs)
    if torch.device(check.device).type == "cuda":
        torch.cuda.synchronize()
    if check.written_outside is not None:
        check.written_outside()
    for tail in check.tails:
        check_tail(tail)
    check_inputs_kept(before, tuple(check.inputs.values()), names, what=check.what, case=check.case,
                      message=check.input_written)
    if ledger is not None:
        for kernel, name, notebook in check.internals:
            flag_internals(kernel, name, notebook)
        if check.reads is not None:
            check.reads(ledger, check.where)
    if check.compare is not None:
        check.compare()
    if ledger is not None and check.work is not None:
        check.work(ledger, check.where)
    return ledger, result
