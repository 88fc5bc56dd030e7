"""Refuse to grade while torch itself has been tampered with below Python.

A checker compares learner results with references computed by torch's operators. Code that
replaces those operators (a ``torch.library`` kernel registered for an aten operator, a torch
function or dispatch mode left active, a dispatch key switched on for the thread) can make any
result compare equal, and the grader's guard (:mod:`attnlab.grading.kernel.guard`), which restores
Python attributes, cannot see it. :func:`check` compares the dispatcher with a snapshot taken when
:mod:`attnlab.checks` was first imported (the notebook's set-up cell, before any learner code) and fails
the check while anything differs, naming it; it also reports the finding for review
(:func:`attnlab.core.review.flag`).

What is watched: the dispatch tables (``torch._C._dispatch_dump``) of every aten operator the
checks and references execute (recorded once, at import) and of the composite operators they call
from Python; every kernel registered through ``torch.library`` for an ``aten`` or ``prims``
operator; the torch function and dispatch mode stacks; the thread's included and excluded
dispatch keys. A kernel torch registers for itself later (from a file inside torch's package,
such as its Meta kernels) is not counted. Registrations through ``torch._C`` directly, for an
operator outside the watched list, are not seen: the static scan (:mod:`attnlab.grading.worker.scan`)
flags ``torch.library`` and ``_dispatch_library`` for review.
"""

from __future__ import annotations

import os
import re

import torch

__all__ = ["check", "problems"]

#: Composite operators the checks reach from Python (decomposed before a dispatch mode sees them).
_COMPOSITE = ("aten::norm.ScalarOpt_dim", "aten::norm.Scalar", "aten::linalg_vector_norm", "aten::matmul",
              "aten::softmax.int", "aten::log_softmax.int", "aten::logsumexp", "aten::allclose",
              "aten::isclose", "aten::abs", "aten::sub.Tensor", "aten::div.Tensor", "aten::item",
              "aten::_local_scalar_dense", "aten::is_nonzero", "aten::isfinite", "aten::to.dtype",
              "aten::to.device", "aten::to.dtype_layout", "aten::randn", "aten::clone", "aten::equal",
              # what autograd runs for reference_gradients (recording it would import sympy: 0.3 s)
              "aten::mul.Tensor", "aten::sum.dim_IntList", "aten::bmm", "aten::mm", "aten::expand",
              "aten::neg", "aten::exp", "aten::masked_fill.Scalar", "aten::where.self", "aten::logsumexp",
              "aten::ones_like", "aten::zeros_like", "aten::add.Tensor", "aten::transpose.int")
_REGISTERED_AT = re.compile(r"registered at (.+?):\d+")
_TORCH_DIR = os.path.dirname(torch.__file__)


def _record_ops(workload) -> set[str]:
    """Names of the aten operators ``workload()`` (one small run of the checks' own computations) executes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class _Record(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # no torch._dynamo import (about 1 s) for this

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.name())
            return func(*args, **(kwargs or {}))

    with _Record():
        workload()
    return seen


def _dumps(names) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = torch._C._dispatch_dump(n)
        except Exception:  # noqa: BLE001 (an operator this torch build does not have)
            pass
    return out


def _impls() -> set[str]:
    lib = getattr(torch, "library", None)
    return set(getattr(lib, "_impls", ()) or ())


def _tls() -> tuple[str, str]:
    return repr(torch._C._dispatch_tls_local_include_set()), repr(torch._C._dispatch_tls_local_exclude_set())


class _Baseline:
    def __init__(self, workload) -> None:
        self.tls = _tls()
        self.impls = _impls()
        self.dumps = _dumps(sorted(_record_ops(workload) | set(_COMPOSITE)))


_BASE: _Baseline | None = None


def take_baseline(workload) -> None:
    """Snapshot the dispatcher now, watching the operators that ``workload()`` runs. Called once, by
    :mod:`attnlab.checks` when it is imported (the notebook's set-up cell, before any learner code): the
    checks sit above this module and hand it their own computations (later calls change nothing)."""
    global _BASE
    if _BASE is None:
        _BASE = _Baseline(workload)


def _foreign(line: str) -> str | None:
    """Where a dispatch-table line's kernel was registered, when that is outside torch's package."""
    m = _REGISTERED_AT.search(line)
    if not m:
        return None
    where = m.group(1)
    if where.startswith(_TORCH_DIR) or "/pytorch/" in where or where.startswith(("/opt/", "/__w/")):
        return None  # torch's own (C++ build paths, or Python registrations inside torch)
    return where


def problems(*, modes_allowed: int = 0) -> list[str]:
    """What differs from the snapshot, one sentence each (empty when nothing does).

    ``modes_allowed`` dispatch modes may be active (the checker's own probe).
    """
    if _BASE is None:
        return ["no snapshot of torch's dispatcher was taken (attnlab.checks, which takes it, was not imported)"]
    found = []
    if torch._C._len_torch_function_stack() > 0:
        found.append("a torch function mode (TorchFunctionMode, or a tensor subclass's __torch_function__ "
                     "handler pushed as a mode) is active")
    if torch._C._len_torch_dispatch_stack() > modes_allowed:
        found.append("a torch dispatch mode (TorchDispatchMode) is active")
    if _tls() != _BASE.tls:
        found.append(f"the thread's dispatch keys were changed (included {_tls()[0]}, excluded {_tls()[1]})")
    for entry in sorted(_impls() - _BASE.impls):
        ns, _, rest = entry.partition("/")
        op, _, key = rest.rpartition("/")
        if ns in ("aten", "prims") and key != "Meta":
            # torch registers kernels lazily too (from files inside its package): judge by origin
            try:
                where = [w for w in map(_foreign, torch._C._dispatch_dump(f"{ns}::{op}").splitlines()) if w]
            except Exception:  # noqa: BLE001
                where = ["an unknown place"]
            if where:
                found.append(f"a kernel was registered with torch.library for the operator {ns}::{op} "
                             f"({key}, from {where[0]})")
    for name, before in _BASE.dumps.items():
        try:
            now = torch._C._dispatch_dump(name)
        except Exception:  # noqa: BLE001
            continue
        if now != before:
            old = set(before.splitlines())
            for line in now.splitlines():
                where = _foreign(line) if line not in old else None
                if where:
                    key = line.split(":", 1)[0]
                    found.append(f"torch's operator {name} was replaced for {key} by a kernel from {where}")
                    break
    return found


def check(what: str) -> None:
    """Fail (``AssertionError``) while torch is tampered with (see the module docstring); the reason
    is also reported for review. ``what`` names the check, for the message."""
    found = problems()
    if not found:
        return
    from ..core import review

    reason = "; ".join(found)
    review.flag(f"torch was tampered with while checking {what}: {reason}")
    raise AssertionError(f"{what}: the checks refuse to run while torch's operators are altered: {reason}. "
                         f"Remove that code (and restart the kernel): results computed through altered "
                         f"operators cannot be graded.")
