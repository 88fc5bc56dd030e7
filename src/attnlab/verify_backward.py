"""Checkers of notebook 07 (FlashAttention backward in Triton): seeded inputs, the learner's kernels
through the course's launcher (:mod:`attnlab.launch_backward`), float64 references from
:mod:`attnlab.reference`.

As in :mod:`attnlab.verify`: every kernel check runs :func:`attnlab.checking.harness.check_kernel`, every call
of learner code goes through :func:`attnlab.checking.harness.call_learner` (time limit,
the grader's guard), inputs are followed by a tile of NaN (an unmasked load past the last row
poisons the result), outputs start as NaN and are followed by guard values (an element never
written stays NaN; a store past the last row changes a guard), and a kernel that writes into its
inputs fails.
"""
# Length: one job, notebook 07's checkers (the preprocessing kernel, the dQ and dK/dV kernels, the whole
# attention, and the three large-offset checks); the steps they share with the other notebooks' checkers
# are in checking/harness.py, the far-offset runs here share one helper (_run_far).

from __future__ import annotations

import ast
import inspect
import textwrap

import torch

from . import launch_backward
from .checks import Case, assert_close, randn, tolerance
from .checking.hints import delta_hint, diagnosed, head_offset_hint, later_heads_hint, lse_base_hint, scale_factor_hint
from .core.device import runtime
from .checking.loads import check_races
from .checking.poisoned import GUARD, guarded, tail_room
from .reference import naive_attention, reference_gradients
from .checking.harness import KernelCheck, Tail, call_learner, check_kernel, kernel_device
from .checking.work_models import backward_designs, check_work

__all__ = ["check_bwd_preprocess", "check_flash_backward_kernels", "check_triton_attention",
           "stores_through_argument", "check_bwd_preprocess_large_offsets", "check_bwd_dq_large_offsets",
           "check_bwd_dkdv_large_offsets"]

#: Position of DQ_ACC among the dK/dV kernel's arguments (launch_backward's contract).
_DQ_ACC_ARG = 8


def _tolerance(dtype, device) -> float:
    """The course's tolerance, except float32 on a GPU: 1e-2. There ``tl.dot`` rounds its operands
    to tf32, and dQ, dK pass through two chained products (dP, then dS K or dSᵀ Q): measured
    relative errors 2.8e-3 on an H200, above the forward's 2e-3. Every mistake of
    samples/mistakes/07 is off by 0.1 or more."""
    if dtype == torch.float32 and torch.device(device).type == "cuda":
        return 1e-2
    return tolerance(dtype, device)


def _case(**kw) -> Case:
    if "dtype" in kw:
        kw["dtype"] = str(kw["dtype"]).replace("torch.", "")
    return Case(**kw)


def _inputs(B, H, T, D, *, causal, seed, dtype, device, tail):
    """q, k, v, do (with NaN tail room) in ``dtype`` on ``device``; o and LSE of the float64
    forward, rounded as a forward kernel would save them; and the float64 reference gradients."""
    q, k, v, do = (randn(B, H, T, D, seed=seed + i) for i in range(4))
    q, k, v, do = (t.to(dtype) for t in (q, k, v, do))  # the reference sees what the kernel sees
    # float64 on the kernel's device (a GPU computes GPU-sized references in milliseconds), back on the CPU
    exact = tuple(t.to(device=device, dtype=torch.float64) for t in (q, k, v, do))
    o, lse = naive_attention(*exact[:3], causal=causal)
    refs = tuple(r.cpu() for r in reference_gradients(*exact, causal=causal))
    o, lse = o.to(dtype), lse.to(torch.float32)
    put = lambda t: tail_room(t.to(device), tail)  # noqa: E731
    return put(q), put(k), put(v), put(o), put(lse), put(do), refs


def _whole(t: torch.Tensor) -> torch.Tensor:
    """The whole flat buffer behind ``t`` (a view from :func:`attnlab.checking.poisoned.tail_room`), tail included."""
    storage = t.untyped_storage()
    return t.new_empty(0).set_(storage, 0, (storage.nbytes() // t.element_size(),))


def stores_through_argument(kernel, index: int, _depth: int = 0) -> bool:
    """Whether ``kernel``'s source calls ``tl.store`` on a pointer derived from its argument ``index``.

    Derived: the argument itself, or any name assigned (also ``+=``) from an expression that uses a
    derived name; a derived value passed to another ``@triton.jit`` function of the kernel's module
    is followed into it. Used to tell a load-add-store of dQ rows that several programs share (a
    race on a GPU, invisible under the interpreter, which runs programs one at a time) from
    ``tl.atomic_add``.
    """
    from triton.runtime.jit import KernelInterface  # JITFunction, or InterpretedFunction under the interpreter

    fn = getattr(kernel, "fn", kernel)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    func = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    if func is None or len(func.args.args) <= index or _depth > 4:
        return False
    derived = {func.args.args[index].arg}
    uses = lambda node: any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(node))  # noqa: E731
    changed = True
    while changed:  # names assigned from derived names, until nothing new turns up
        changed = False
        for node in ast.walk(func):
            targets, value = [], None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            if value is None or not uses(value):
                continue
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id not in derived:
                        derived.add(n.id)
                        changed = True
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr == "store" and node.args and uses(node.args[0]):
            return True
        callee = getattr(fn, "__globals__", {}).get(node.func.id) if isinstance(node.func, ast.Name) else None
        if isinstance(callee, KernelInterface) and hasattr(callee, "fn"):
            params = list(inspect.signature(callee.fn).parameters)
            passed = [i for i, arg in enumerate(node.args) if uses(arg)]
            passed += [params.index(kw.arg) for kw in node.keywords if kw.arg in params and uses(kw.value)]
            if any(stores_through_argument(callee, i, _depth + 1) for i in passed):
                return True
    return False


def check_bwd_preprocess(kernel, *, T: int, B: int = 1, H: int = 2, D: int = 32, block_m: int = 16,
                         dtype=torch.float32, seed: int = 0, device: str | None = None):
    """Check ``_bwd_preprocess_kernel``: Δ = rowsum(dO ∘ O), float32 (B, H, T), against float64.

    Launched alone, as the backward launcher launches it (grid (cdiv(T, block_m), B*H)).

    Raises:
        AssertionError: Δ wrong (with the first wrong index), or a store past the last row.

    Contract: ``attnlab.contracts.bwd_preprocess_kernel``.
    """
    import triton

    from . import launch

    device = device or runtime().device
    launch.require_kernel(kernel, "_bwd_preprocess_kernel")
    case = _case(B=B, H=H, T=T, D=D, block_m=block_m, dtype=dtype)
    o, do = (tail_room(randn(B, H, T, D, seed=seed + i).to(device=device, dtype=dtype), block_m * D)
             for i in range(2))
    expected = (o.cpu().double() * do.cpu().double()).sum(-1)
    delta, buf = guarded((B, H, T), block_m, torch.float32, device)

    def run():
        runnable = launch.prepare_kernel(kernel, "_bwd_preprocess_kernel", {"o": o, "do": do},
                                         "_bwd_preprocess_kernel")
        runnable[(triton.cdiv(T, block_m), B * H)](o, do, delta, o.stride(1), o.stride(2), T,
                                                    BLOCK_M=block_m, HEAD_DIM=D)
    check_kernel(KernelCheck(
        what="_bwd_preprocess_kernel", case=case, launch=run, key=kernel, device=device,
        tails=(Tail(buf, B * H * T, f"_bwd_preprocess_kernel [{case}]: wrote past the last row of DELTA: mask the "
                                    f"store with offs_m < T"),),
        compare=lambda: assert_close(delta.cpu(), expected, name="Δ = rowsum(dO ∘ O)", case=case,
                                     tol=max(tolerance(dtype, device), 1e-5))))


def _one_head_stays_inside(kernels, inputs, *, causal, block_m, block_n) -> bool:
    """The backward kernels on the first head of ``inputs`` (q, k, v, o, lse, do) alone store nothing past
    its last row (for :func:`attnlab.checking.hints.head_offset_hint`)."""
    tail = max(block_m, block_n) * inputs[0].shape[-1]
    q, k, v, o, lse, do = (tail_room(t[:1, :1], tail) for t in inputs)
    outs, bufs = zip(*(guarded(q.shape, tail, q.dtype, q.device) for _ in range(3)))
    delta = guarded(lse.shape, max(block_m, block_n), torch.float32, q.device)[0]
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    call_learner(launch_backward.run_backward_kernels, "the backward kernels", kernels, q, k, v, o, lse, do, delta, *outs,
          dq_acc, causal=causal, block_m=block_m, block_n=block_n, _key=kernels[1])
    return all(bool((buf[q.numel():] == GUARD).all()) for buf in bufs)


def check_flash_backward_kernels(kernels, *, T: int, B: int = 1, H: int = 2, D: int = 32,
                                 causal: bool = False, block_m: int = 16, block_n: int = 16,
                                 dtype=torch.float32, seed: int = 0, num_warps: int = 4, num_stages: int = 2,
                                 device: str | None = None):
    """Check the three backward kernels through the course launcher: dq, dk, dv against autograd of
    ``naive_attention`` in float64 (:func:`attnlab.reference.reference_gradients`).

    Args:
        kernels: (preprocess, dkdv, dq) ``@triton.jit`` functions.
        T, B, H, D, causal, block_m, block_n, num_warps, num_stages: the case.
        dtype: of q, k, v, o, do; the float64 forward's O and LSE are rounded to it (LSE float32).

    Under Triton's interpreter (CPU-sized cases, on every machine) the three launches are recorded
    in the work ledger (:mod:`attnlab.checking.loads`) and compared with notebook 07's cost model
    (:func:`attnlab.checking.work_models.backward_designs`: each program reads its own tile once and walks the
    other side's tiles from its diagonal when causal, the work spread over the grid, the products
    through ``tl.dot``; dQ by its own kernel or added with atomics by the dK/dV kernel).

    Raises:
        AssertionError: naming the case, the gradient and the first wrong index; also when a kernel
        stores past the last row, writes into an input, breaks the cost model (naming the rule and
        the figure measured), or races: two programs of one launch touch an element one of them
        writes with a plain store (dQ rows added with a load and a store, however spelled, instead of
        ``tl.atomic_add``).
        TypeError: a kernel is not a ``@triton.jit`` function.

    Contracts: ``attnlab.contracts.bwd_preprocess_kernel``, ``attnlab.contracts.bwd_dkdv_kernel``, ``attnlab.contracts.bwd_dq_kernel``.
    """
    device, accounted = kernel_device(device, dtype=dtype, elements=B * H * T * T)
    kernels = launch_backward.BackwardKernels(*kernels)
    case = _case(B=B, H=H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n, dtype=dtype)
    # without the work ledger (a GPU-sized case), the source scan stands in for its race check
    if not accounted and stores_through_argument(kernels[1], _DQ_ACC_ARG):
        raise AssertionError(f"_bwd_dkdv_kernel [{case}]: stores to DQ_ACC with tl.store. Programs of "
                             f"different key tiles add into the same dQ rows at the same time: a load "
                             f"followed by a store loses updates on a GPU. Use tl.atomic_add.")
    tail = max(block_m, block_n) * D
    q, k, v, o, lse, do, refs = _inputs(B, H, T, D, causal=causal, seed=seed, dtype=dtype, device=device,
                                        tail=tail)
    launch_backward.validate_backward(q, k, v, o, lse, do, block_m, block_n)
    inputs = tuple(t.clone() for t in (q, k, v, o, lse, do))
    outs, bufs = zip(*(guarded(q.shape, tail, dtype, device) for _ in range(3)))
    delta, delta_buf = guarded((B, H, T), max(block_m, block_n), torch.float32, device)
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=device)
    buffers = dict(zip(("Q", "K", "V", "O", "LSE", "DO"), map(_whole, (q, k, v, o, lse, do))),
                   DELTA=delta_buf, DQ=bufs[0], DK=bufs[1], DV=bufs[2], DQ_ACC=dq_acc)

    def past_the_end(name: str):
        def message() -> str:
            why = head_offset_hint(B * H, lambda: _one_head_stays_inside(kernels, inputs, causal=causal,
                                                                        block_m=block_m, block_n=block_n))
            return (f"backward kernels [{case}]: wrote past the last row of {name}: "
                    f"{why or 'padded rows (offsets >= T) must be masked out of the stores'}")
        return message

    tol = _tolerance(dtype, device)

    def compare() -> None:
        for name, out, ref in zip(("dq", "dk", "dv"), outs, refs):
            q_, k_, v_, *_, do_ = inputs
            diagnosed(lambda: assert_close(out.cpu(), ref, name=name, case=case, tol=tol),
                      lambda: delta_hint(name, out.cpu(), q_, k_, v_, do_, causal=causal, scale=None, block_k=block_n,
                                         tol=tol, symbol="Δ"),
                      lambda: scale_factor_hint(name, out.cpu(), ref, D ** -0.5, tol),
                      lambda: lse_base_hint(name, out.cpu(), q_, k_, v_, do_, causal=causal, tol=tol))

    n = q.numel()
    check_kernel(KernelCheck(
        what="backward kernels", call_name="the backward kernels", case=case,
        launch=launch_backward.run_backward_kernels,
        args=(kernels, q, k, v, o, lse, do, delta, *outs, dq_acc),
        kwargs=dict(causal=causal, block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages),
        key=kernels[1], device=device, accounted=accounted, buffers=buffers,
        tails=(*(Tail(buf, n, past_the_end(name)) for name, buf in zip(("DQ", "DK", "DV"), bufs)),
               Tail(delta_buf, B * H * T, f"_bwd_preprocess_kernel [{case}]: wrote past the last row of DELTA")),
        inputs=dict(zip(("Q", "K", "V", "O", "LSE", "DO"), (q, k, v, o, lse, do))),
        input_written="{what} [{case}]: wrote into the input {name}: the kernels may only store to DELTA, DQ, DK, "
                      "DV and DQ_ACC",
        internals=tuple(zip(kernels, ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"), ("07",) * 3)),
        reads=lambda ledger, where: check_races(ledger, where=where,
                                                names={"DQ_ACC": "DQ_ACC (dQ rows shared by every key tile)"}),
        compare=compare,
        # after the numbers: a kernel that skips work it needs is wrong, and the result's check (with its
        # diagnoses) names that better than the method's rules would; right numbers by the wrong method fail here
        work=lambda ledger, where: check_work(ledger, backward_designs(
            B=B, H=H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n, buffer_len=buffers["Q"].numel(),
            row_len=max(buffers["LSE"].numel(), delta_buf.numel())), where=where)))


def check_triton_attention(attn, *, T: int, B: int = 1, H: int = 2, D: int = 16, causal: bool = False,
                           dtype=torch.float32, seed: int = 0, device: str | None = None, name="triton_attention"):
    """Check ``attn(q, k, v, causal) -> o`` end to end: o, then q/k/v .grad after ``o.backward(do)``,
    against ``naive_attention`` and autograd in float64.

    Raises:
        AssertionError: naming the case and the first wrong element, or an input no gradient reached.
    """
    device = device or runtime().device
    case = _case(B=B, H=H, T=T, D=D, causal=causal, dtype=dtype)
    q, k, v, do = (randn(B, H, T, D, seed=seed + i).to(dtype) for i in range(4))
    exact = tuple(t.to(torch.float64) for t in (q, k, v, do))
    on_device = tuple(t.to(device) for t in exact)  # the references computed there, compared on the CPU
    o_ref = naive_attention(*on_device[:3], causal=causal)[0].cpu()
    refs = tuple(r.cpu() for r in reference_gradients(*on_device, causal=causal))
    q, k, v = (t.to(device).requires_grad_(True) for t in (q, k, v))
    o = call_learner(attn, name, q, k, v, causal)
    tol = _tolerance(dtype, device)
    assert_close(o.detach().cpu(), o_ref, name="o", case=case, tol=tol)
    call_learner(o.backward, f"{name} backward", do.to(device))
    for gname, t, ref in zip(("q.grad", "k.grad", "v.grad"), (q, k, v), refs):
        if t.grad is None:
            raise AssertionError(f"{gname} [{case}]: no gradient reached this input")
        diagnosed(lambda: assert_close(t.grad.cpu(), ref, name=gname, case=case, tol=tol),
                  lambda: scale_factor_hint(gname, t.grad.cpu(), ref, D ** -0.5, tol),
                  lambda: lse_base_hint("d" + gname[0], t.grad.cpu(), *exact, causal=causal, tol=tol),
                  lambda: later_heads_hint(t.grad, ref, tol))


# ------------------------------------------------------------------------------ offsets past 2^31
_FAR_HEADS = 3  # head 2 of three heads of 2^30 elements starts at element 2^31


def _run_far(kernel, what: str, launch_args, *, D: int, rows: int, names, row_names, seed: int, block: int):
    """Launch ``kernel`` on grid (1, 3) over three heads of T = 2³⁰ / D rows, only the first ``rows`` of
    each existing (:func:`attnlab.checking.sparse.far_heads`), under the load accounting, on the CPU through the
    interpreter. ``launch_args(t, T)`` gives the kernel's arguments from the tensors ``t`` (by name);
    the inputs hold the small float64 problem's values (returned with it). None where the memory
    cannot be placed (printed)."""
    from . import launch
    from .checking import sparse

    T = 2**30 // D
    try:
        t, mem = sparse.far_heads(names, heads=_FAR_HEADS, T=T, D=D, rows=rows, spare=rows * D)
        per_row, row_mem = sparse.far_heads(row_names, heads=_FAR_HEADS, T=T, D=None, rows=rows, spare=rows)
    except OSError as exc:
        print(f"(the large-offset case of {what} is skipped here: {exc})")
        return None
    t.update(per_row)
    q, k, v, do = (randn(_FAR_HEADS, 1, rows, D, seed=seed + i).to(torch.float32).double() for i in range(4))
    o, lse = naive_attention(q, k, v, causal=True)
    o = o.to(torch.float32).double()
    small = dict(Q=q, K=k, V=v, DO=do, O=o, LSE=lse, DELTA=(o * do).sum(-1), DQ_ACC=torch.zeros_like(q))
    for name, x in small.items():  # only the pieces are written
        if name in t:
            t[name][:, :, :rows] = x
    buffers = {f"rows of head {h}": p for h, p in enumerate(mem.pieces)}
    buffers.update({f"per-row values of head {h}": p for h, p in enumerate(row_mem.pieces)})
    tensors = {name.lower(): x for name, x in t.items() if x.dim() == 4}

    def run():
        launch.prepare_kernel(kernel, what, tensors, what)[(1, _FAR_HEADS)](*launch_args(t, T))

    case = Case(B=_FAR_HEADS, H=1, T=T, D=D, **({"causal": True} if "Q" in t else {}), stride_bh=T * D,
                launched=f"the first tile of {block} rows of each head")
    check_kernel(KernelCheck(what=what, case=case, launch=run, key=kernel, accounted=True, buffers=buffers))
    return t, small, case


def _far_diagnosed(got, want, *, name: str, case) -> None:
    from .checking.hints import int32_offset_hint

    far = [(h + 1) * 2**30 > 2**31 for h in range(_FAR_HEADS)]
    diagnosed(lambda: assert_close(got, want, name=name, case=case, tol=1e-5),
              lambda: int32_offset_hint(got, want, 1e-5, far=far, what="bh * stride_bh",
                                        fix="bh = tl.program_id(1).to(tl.int64)"))


def check_bwd_preprocess_large_offsets(kernel, *, D: int = 16, block_m: int = 16, seed: int = 0):
    """Check ``_bwd_preprocess_kernel`` where ``bh * stride_bh`` passes 2³¹ elements: Δ of the first
    ``block_m`` rows of three heads of 2³⁰ / D rows (head 2 starts at element 2³¹), only those rows
    existing (:mod:`attnlab.checking.sparse`). On the CPU through the interpreter on every machine; where the
    memory cannot be placed (not Linux) it prints why and checks nothing.

    Raises:
        AssertionError: Δ wrong; when the heads below 2³¹ are right and the one past it is wrong, saying
            to widen ``bh`` to 64 bits.
    """
    out = _run_far(kernel, "_bwd_preprocess_kernel",
                   lambda t, T: (t["O"], t["DO"], t["DELTA"], T * D, D, T, block_m, D),
                   D=D, rows=block_m, names=("O", "DO"), row_names=("DELTA",), seed=seed, block=block_m)
    if out is not None:
        t, small, case = out
        _far_diagnosed(t["DELTA"][:, :, :block_m].clone(), small["DELTA"], name="Δ = rowsum(dO ∘ O)", case=case)


def check_bwd_dq_large_offsets(kernel, *, D: int = 16, block_m: int = 16, block_n: int = 16, seed: int = 0):
    """Check ``_bwd_dq_kernel`` where ``bh * stride_bh`` passes 2³¹ elements: dQ of the first query tile
    (``block_n`` rows, stepping ``block_m`` keys, as the launcher sets them) of three causal heads of
    2³⁰ / D rows, with exact LSE and Δ. A kernel that only copies ``DQ_ACC`` out (dQ added by the dK/dV
    kernel's atomics) writes zeros here: the check does not apply to it and passes.

    Raises:
        AssertionError: dQ wrong; when the heads below 2³¹ are right and the one past it is wrong, saying
            to widen ``bh`` to 64 bits.
    """
    rows = max(block_m, block_n)
    out = _run_far(kernel, "_bwd_dq_kernel",
                   lambda t, T: (t["Q"], t["K"], t["V"], t["DO"], t["LSE"], t["DELTA"], t["DQ"], t["DQ_ACC"], T * D,
                                 D, T, D ** -0.5, True, block_n, block_m, D),
                   D=D, rows=rows, names=("Q", "K", "V", "DO", "DQ", "DQ_ACC"), row_names=("LSE", "DELTA"),
                   seed=seed, block=block_n)
    if out is None:
        return
    t, small, case = out
    got = t["DQ"][:, :, :block_n].clone()
    if bool((got[:-1] == 0).all()):  # the heads below 2^31: the copy-out of DQ_ACC (all zeros here)
        return
    want = reference_gradients(small["Q"], small["K"], small["V"], small["DO"], causal=True)[0][:, :, :block_n]
    _far_diagnosed(got, want, name="dq", case=case)


def check_bwd_dkdv_large_offsets(kernel, *, D: int = 16, block_m: int = 16, block_n: int = 16, seed: int = 0):
    """Check ``_bwd_dkdv_kernel`` where ``bh * stride_bh`` passes 2³¹ elements: dK and dV of three causal
    heads of ``max(block_m, block_n)`` rows each (T), laid 2³⁰ elements apart (stride_bh = 2³⁰,
    stride_t = D), so head 2 starts at element 2³¹. Key tiles need every query after them, so the heads
    are short and only their stride is large: LSE and Δ are small contiguous (3, 1, T) float32 tensors
    (``bh * T`` stays small), Q, K, V, dO, dK, dV and DQ_ACC float32 with only the rows existing
    (:mod:`attnlab.checking.sparse`). Grid (cdiv(T, block_n), 3), on the CPU through the interpreter,
    under the load accounting; where the memory cannot be placed (not Linux) it prints why and checks
    nothing. A kernel that steps heads by ``T * HEAD_DIM`` instead of ``stride_bh`` (the same on the
    launcher's contiguous inputs) gets head 1 wrong here too: the check then does not apply to it and
    passes, with a note.

    Raises:
        AssertionError: heads 0 and 1 right and head 2 wrong, saying to widen ``bh`` to 64 bits.
    """
    from . import launch
    from .checking import sparse
    from .checking.hints import int32_offset_hint, matches_with_empty

    rows = max(block_m, block_n)
    stride = 2**30
    names = ("Q", "K", "V", "DO", "DK", "DV", "DQ_ACC")
    try:
        t, mem = sparse.far_heads(names, heads=_FAR_HEADS, T=stride // D, D=D, rows=rows, spare=rows * D)
    except OSError as exc:
        print(f"(the large-offset case of _bwd_dkdv_kernel is skipped here: {exc})")
        return
    t = {name: x[:, :, :rows] for name, x in t.items()}
    q, k, v, do = (randn(_FAR_HEADS, 1, rows, D, seed=seed + i).to(torch.float32).double() for i in range(4))
    o, lse = naive_attention(q, k, v, causal=True)
    o = o.to(torch.float32).double()
    for name, x in dict(Q=q, K=k, V=v, DO=do, DQ_ACC=torch.zeros_like(q)).items():
        t[name].copy_(x)
    lse32 = lse.to(torch.float32).contiguous()
    delta = (o * do).sum(-1).to(torch.float32).contiguous()
    buffers = {f"rows of head {h}": p for h, p in enumerate(mem.pieces)}
    buffers.update({"LSE": lse32, "DELTA": delta})
    tensors = {name.lower(): x for name, x in t.items()}
    case = Case(B=_FAR_HEADS, H=1, T=rows, D=D, causal=True, block_m=block_m, block_n=block_n, stride_bh=stride,
                launched="every key tile of three short heads 2^30 elements apart")

    def run():
        grid = ((rows + block_n - 1) // block_n, _FAR_HEADS)
        launch.prepare_kernel(kernel, "_bwd_dkdv_kernel", tensors, "_bwd_dkdv_kernel")[grid](
            t["Q"], t["K"], t["V"], t["DO"], lse32, delta, t["DK"], t["DV"], t["DQ_ACC"], stride, D, rows,
            D ** -0.5, True, block_m, block_n, D)

    check_kernel(KernelCheck(what="_bwd_dkdv_kernel", case=case, launch=run, key=kernel, accounted=True,
                             buffers=buffers))
    _, dk_ref, dv_ref = reference_gradients(q, k, v, do, causal=True)
    far = [h * stride >= 2**31 for h in range(_FAR_HEADS)]
    for name, want in (("dk", dk_ref), ("dv", dv_ref)):
        got = t[name.upper()].clone().double()
        if not all(matches_with_empty(got[h], want[h], 1e-5) for h, f in enumerate(far) if not f):
            print(f"(the large-offset case of _bwd_dkdv_kernel does not apply: {name} of the heads below 2^31 "
                  f"is wrong too, so this kernel does not step heads by stride_bh)")
            return
        diagnosed(lambda: assert_close(got, want, name=name, case=case, tol=1e-5),
                  lambda: int32_offset_hint(got, want, 1e-5, far=far, what="bh * stride_bh",
                                            fix="bh = tl.program_id(1).to(tl.int64)"))
