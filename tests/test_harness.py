"""The kernel-check skeleton (:func:`attnlab.checking.harness.check_kernel`) catches each failure class
of a kernel on a tiny fake launcher (plain torch, no Triton): an output element left unwritten, a store
past the end of an output, a write into an input, a wrong value; and passes an honest one."""

from __future__ import annotations

import pytest
import torch

from attnlab.checks import Case, assert_close
from attnlab.checking.harness import (GUARD, KernelCheck, Tail, call_learner, check_inputs_kept, check_kernel,
                                      check_tail, kernel_device)
from attnlab.checking.poisoned import guarded, with_tail

N, SPARE = 10, 4


def fake_launcher(x: torch.Tensor, y: torch.Tensor, y_buf: torch.Tensor, *, mistake: str | None) -> None:
    """Computes y = 2 x into the view ``y`` of ``y_buf``, with one of the kernel mistakes the harness catches."""
    if mistake == "unwritten":
        y[:-1] = 2 * x[:-1]
        return
    y.copy_(3 * x if mistake == "wrong value" else 2 * x)
    if mistake == "past the end":
        y_buf[N + 1] = 0.0
    if mistake == "input written":
        x[3] = 0.0


def run(mistake: str | None) -> None:
    x, x_buf = with_tail(torch.arange(1.0, N + 1), SPARE)
    want = 2 * x.clone()
    y, y_buf = guarded((N,), SPARE, torch.float32, "cpu")
    case = Case(N=N, mistake=mistake)
    check_kernel(KernelCheck(
        what="fake_kernel", case=case, launch=fake_launcher, args=(x, y, y_buf), kwargs={"mistake": mistake},
        device="cpu", buffers={"X": x_buf, "Y": y_buf},
        tails=(Tail(y_buf, N, f"fake_kernel [{case}]: wrote past the end of Y"),),
        inputs={"X": x}, compare=lambda: assert_close(y, want, name="y", case=case, tol=1e-6)))


def test_an_honest_kernel_passes():
    run(None)


@pytest.mark.parametrize("mistake,message", [
    ("unwritten", "y "),
    ("past the end", "wrote past the end of Y"),
    ("input written", "wrote into its input X: a kernel may only store to its outputs"),
    ("wrong value", "y "),
])
def test_each_failure_class_is_caught(mistake, message):
    with pytest.raises(AssertionError, match=message):
        run(mistake)


def test_the_steps_run_in_order_tails_before_inputs_before_values():
    """A kernel with every mistake at once fails on its store past the end, the first step after the launch."""
    x, _ = with_tail(torch.ones(N), SPARE)
    y, y_buf = guarded((N,), SPARE, torch.float32, "cpu")

    def everything(x, y, y_buf):
        y_buf[N] = 1.0
        x[0] = 5.0

    with pytest.raises(AssertionError, match="tail"):
        check_kernel(KernelCheck(what="k", case=Case(), launch=everything, args=(x, y, y_buf),
                                 tails=(Tail(y_buf, N, lambda: "tail"),), inputs={"X": x},
                                 compare=lambda: pytest.fail("compared before the tails")))


def test_the_helpers_alone():
    buf = torch.full((N + SPARE,), GUARD)
    check_tail(Tail(buf, N, "unused"))
    buf[N + SPARE - 1] = 0.0
    with pytest.raises(AssertionError, match="changed"):
        check_tail(Tail(buf, N, lambda: "changed"))
    before = torch.tensor([1.0, float("nan")])
    check_inputs_kept((before,), (before.clone(),), ("A",), what="k", case=Case())  # NaN equals NaN
    with pytest.raises(AssertionError, match=r"k \[\]: wrote into its input A"):
        check_inputs_kept((before,), (torch.zeros(2),), ("A",), what="k", case=Case())


@pytest.mark.parametrize("changed", [
    [1.0, 0.0],                      # a NaN overwritten with 0 (nan_to_num took both as 0)
    [1.0000001, float("nan")],       # one ulp: no tolerance
    [1.0, float("inf")],             # a NaN overwritten with an infinity
])
def test_check_inputs_kept_is_exact_and_nan_aware(changed):
    before = torch.tensor([1.0, float("nan")])
    with pytest.raises(AssertionError, match="wrote into its input A"):
        check_inputs_kept((before,), (torch.tensor(changed),), ("A",), what="k", case=Case())
    zero = torch.tensor([0.0, 2.0])
    with pytest.raises(AssertionError, match="wrote into its input Z"):  # -0.0 is another bit pattern
        check_inputs_kept((zero,), (torch.tensor([-0.0, 2.0]),), ("Z",), what="k", case=Case())
    big = torch.tensor([float("inf")], dtype=torch.float16)
    with pytest.raises(AssertionError, match="wrote into its input B"):
        check_inputs_kept((big,), (torch.tensor([65504.0], dtype=torch.float16),), ("B",), what="k", case=Case())
    payload = torch.tensor([float("nan")]).view(torch.int32).add(1).view(torch.float32)
    check_inputs_kept((before[1:],), (payload,), ("A",), what="k", case=Case())  # any NaN matches a NaN


def test_call_learner_returns_the_result_and_a_cpu_case_stays_on_the_cpu():
    assert call_learner(lambda a, b=0: a + b, "add", 1, b=2) == 3
    assert kernel_device("cpu", dtype=torch.float32, elements=16)[0] == "cpu"


def test_a_probe_that_fails_inside_is_flagged_for_review_not_passed(monkeypatch):
    from attnlab.checking.probe import MethodProbe
    from attnlab.core import review

    class Broken(MethodProbe):
        def _judge(self, func, info, args, kwargs, out):
            raise RuntimeError("a rule the probe could not evaluate")

    notes: list[str] = []
    monkeypatch.setattr(review, "flag", notes.append)
    x = torch.arange(6.0).reshape(2, 3)
    probe = Broken(rule="no whole score matrix", size_limit=10**6, inputs=(x,))
    out = call_learner(lambda t: (t * 2).sum(-1), "rowsum", x, _probe=probe)  # still returns the result
    assert torch.equal(out, torch.tensor([6.0, 24.0]))
    assert any("method probe failed inside" in n and "RuntimeError" in n for n in notes), notes
    assert probe.internal_error and "could not evaluate" in probe.internal_error
    notes.clear()
    honest = MethodProbe(rule="no whole score matrix", size_limit=10**6, inputs=(x,))
    call_learner(lambda t: (t * 2).sum(-1), "rowsum", x, _probe=honest)
    assert not notes, notes
