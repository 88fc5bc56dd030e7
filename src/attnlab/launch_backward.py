"""The given launchers of notebook 07: FlashAttention backward from three Triton kernels, and the
autograd Function that pairs a forward with them (by default PyTorch's own FlashAttention
forward, :func:`reference_forward`).

The learner writes the kernels; these functions validate the inputs, allocate NaN-poisoned
outputs and launch the kernels the way notebook 07's contract says (same layout and conventions
as notebook 05's forward, :mod:`attnlab.launch`):

- contiguous (B, H, T, D) tensors, so ``stride_bh = T*D`` and ``stride_t = D``; LSE and Δ are
  float32 (B, H, T), one value per query row (Δ_i = rowsum(dO ∘ O)_i, Dao 2023, Algorithm 2 line 4);
- ``preprocess``, grid (cdiv(T, BLOCK_M), B*H) (contract: ``attnlab.contracts.bwd_preprocess_kernel``);
- ``dkdv``, grid (cdiv(T, BLOCK_N), B*H): one program per key tile (contract:
  ``attnlab.contracts.bwd_dkdv_kernel``);
- ``dq``, grid (cdiv(T, BLOCK_M), B*H): one program per query tile, launched after dkdv (contract:
  ``attnlab.contracts.bwd_dq_kernel``).

In every kernel BLOCK_M counts query rows and BLOCK_N keys. The launcher's ``block_n`` is the
tile a program *owns* and ``block_m`` the *step* of its inner loop: the dK/dV kernel gets
``BLOCK_N = block_n`` keys and steps ``BLOCK_M = block_m`` queries; the dQ kernel gets the
transposed shape, ``BLOCK_M = block_n`` queries stepping ``BLOCK_N = block_m`` keys, and so does
the preprocess (``BLOCK_M = block_n``). A large owned tile is what saves memory traffic (each
loaded K/V or Q/dO tile serves more rows), as in FlashAttention-2's backward.

``DQ_ACC`` is a float32 (B, H, T, D) buffer of zeros. The standard design (dQ with query tiles
outer) ignores it; the alternative design adds each key tile's share of dQ into it with
``tl.atomic_add`` inside the dK/dV kernel, and the dQ kernel then only writes ``DQ_ACC · scale``
into DQ. Either way DQ, DK and DV start as NaN, so an element no kernel writes fails the checks.
"""

from __future__ import annotations

from types import MappingProxyType

import torch

from . import launch
from .reference import naive_attention, validate_qkv

__all__ = ["BackwardKernels", "validate_backward", "run_backward_kernels", "launch_flash_backward",
           "reference_forward", "attention_function"]

class BackwardKernels(tuple):
    """(preprocess, dkdv, dq): the three ``@triton.jit`` kernels of the backward, in launch order."""

    def __new__(cls, preprocess, dkdv, dq):
        for kernel, what in ((preprocess, "_bwd_preprocess_kernel"), (dkdv, "_bwd_dkdv_kernel"),
                             (dq, "_bwd_dq_kernel")):
            launch.require_kernel(kernel, what)
        return super().__new__(cls, (preprocess, dkdv, dq))


def validate_backward(q, k, v, o, lse, do, block_m, block_n, where="triton_flash_attention_backward") -> None:
    """Raise a clear error unless (q, k, v, o, lse, do) is a valid input of the backward launcher.

    Args:
        q, k, v, o, do: (B, H, T, D), one dtype (float16, bfloat16, float32), one device; D a power
            of two >= 16.
        lse: (B, H, T), float32, the natural-log LSE the forward saved.
        block_m, block_n: powers of two >= 16.

    Raises:
        TypeError: a non-tensor, or a dtype that is not supported or differs between tensors.
        ValueError: a wrong shape, a different device, or a bad head dim or block size.
    """
    validate_qkv(q, k, v, where=where)
    if q.shape != k.shape:
        raise ValueError(f"{where}: this kernel does self-attention; q, k, v must all be (B, H, T, D), "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.dtype not in launch.KERNEL_DTYPES:
        raise TypeError(f"{where}: dtype {q.dtype} not supported; use float16, bfloat16 or float32")
    for name, t in (("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{where}: {name} must be like q ({tuple(q.shape)}, {q.dtype}, {q.device}), "
                             f"got {tuple(t.shape)}, {t.dtype}, {t.device}")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"{where}: lse must be a torch.Tensor, got {type(lse).__name__}")
    if lse.shape != q.shape[:3] or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"{where}: lse must be (B, H, T) = {tuple(q.shape[:3])}, float32, on {q.device} "
                         f"(what the forward returns), got {tuple(lse.shape)}, {lse.dtype}, {lse.device}")
    launch.validate_blocks(q.shape[-1], block_m, block_n, where)


def run_backward_kernels(kernels: BackwardKernels, q, k, v, o, lse, do, delta, dq, dk, dv, dq_acc, *,
                         causal, block_m, block_n, num_warps=4, num_stages=2):
    """Launch the three kernels into the given buffers (no allocation; :func:`launch_flash_backward`
    validates and allocates).

    Args:
        kernels: :class:`BackwardKernels` (or a (preprocess, dkdv, dq) tuple of ``@triton.jit`` functions).
        q, k, v, o, do: contiguous (B, H, T, D), one dtype and device; lse: contiguous float32 (B, H, T).
        delta: contiguous float32 (B, H, T), written by the preprocess; dq, dk, dv: contiguous like q,
            written; dq_acc: contiguous float32 (B, H, T, D) holding zeros.
        causal, block_m, block_n, num_warps, num_stages: as :func:`launch_flash_backward`.

    Returns:
        (dq, dk, dv).

    Raises:
        TypeError: a kernel that is not a ``@triton.jit`` function, or a dtype this mode cannot run.
        ValueError: a tensor that is not contiguous (the kernels get one ``stride_bh = T*D``,
            ``stride_t = D`` for all of them, so a view would be read wrong), or a wrong device.

    Contracts: ``attnlab.contracts.bwd_preprocess_kernel``, ``attnlab.contracts.bwd_dkdv_kernel``, ``attnlab.contracts.bwd_dq_kernel``.
    """
    import triton

    preprocess, dkdv, dq_kernel = kernels
    launch.require_contiguous(
        "run_backward_kernels",
        {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do, "delta": delta, "dq": dq, "dk": dk, "dv": dv,
         "dq_acc": dq_acc},
        "the kernels address every tensor with stride_bh = T*D and stride_t = D (per-row vectors at bh*T)")
    B, H, T, D = q.shape
    sbh, st = T * D, D  # contiguous (B, H, T, D): a size-1 dim may have any stride, so not q.stride()
    scale = D ** -0.5
    # each kernel is converted for the interpreter if needed, checked against this mode's dtypes and
    # compiled for the course's GPU targets before its first launch (a failure names the kernel)
    tensors = {"q": q, "k": k, "v": v, "o": o, "do": do}
    preprocess, dkdv, dq_kernel = (
        launch.prepare_kernel(kern, what, tensors, "triton_flash_attention_backward")
        for kern, what in zip(kernels, ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel")))
    meta = dict(num_warps=num_warps, num_stages=num_stages)
    preprocess[(triton.cdiv(T, block_n), B * H)](o, do, delta, sbh, st, T, BLOCK_M=block_n, HEAD_DIM=D, **meta)
    dkdv[(triton.cdiv(T, block_n), B * H)](q, k, v, do, lse, delta, dk, dv, dq_acc, sbh, st, T, scale,
                                            CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n,
                                            HEAD_DIM=D, **meta)
    # the dQ kernel owns block_n queries and steps block_m keys (the transposed tile shape)
    dq_kernel[(triton.cdiv(T, block_n), B * H)](q, k, v, do, lse, delta, dq, dq_acc, sbh, st, T, scale,
                                                 CAUSAL=bool(causal), BLOCK_M=block_n, BLOCK_N=block_m,
                                                 HEAD_DIM=D, **meta)
    return dq, dk, dv


def backward_buffers(q, block_m: int, block_n: int):
    """(delta, dq, dk, dv, dq_acc) for contiguous ``q``: the outputs (:func:`attnlab.launch.output`:
    NaN-poisoned, each followed by one padded tile of spare elements, inside
    :func:`attnlab.launch.checking` and on the CPU; ``torch.empty`` otherwise) and a zeroed float32
    dQ accumulator (with the same spare room when checking)."""
    B, H, T, D = q.shape
    tail = max(block_m, block_n) * D
    delta = launch.output((B, H, T), max(block_m, block_n), torch.float32, q.device)
    dq, dk, dv = (launch.output(q.shape, tail, q.dtype, q.device) for _ in range(3))
    spare = tail if launch.checks_on(q.device) else 0
    dq_acc = torch.zeros(B * H * T * D + spare, dtype=torch.float32, device=q.device)[:B * H * T * D].view(q.shape)
    return delta, dq, dk, dv, dq_acc


def launch_flash_backward(kernels, q, k, v, o, lse, do, causal=False, block_m=64, block_n=64,
                          num_warps=4, num_stages=2):
    """FlashAttention backward by the learner's three kernels (notebook 07's contract).

    Args:
        kernels: (preprocess, dkdv, dq) ``@triton.jit`` functions, signatures in the module docstring.
        q, k, v: (B, H, T, D) forward inputs; o: the forward output; lse: (B, H, T) float32, the
            natural-log LSE the forward saved; do: dL/dO. See :func:`validate_backward`.
        causal: top-left aligned causal mask (query i sees keys j <= i).
        block_m, block_n: powers of two >= 16: block_n is the tile a program owns (keys in the dK/dV
            kernel, queries in the dQ kernel), block_m the step of its inner loop (see module docstring).
        num_warps, num_stages: passed to Triton (ignored by the interpreter).

    Returns:
        (dq, dk, dv), each (B, H, T, D) in q's dtype (NaN where a kernel never wrote, inside
        :func:`attnlab.launch.checking` and on the CPU: :func:`backward_buffers`).

    Raises:
        TypeError, ValueError: from :func:`validate_backward`, naming the bad argument.

    Reads no tensor value on the host: a call on GPU tensors can be captured in a CUDA graph and
    replayed, once a call outside the capture has compiled the kernels.

    Source: Dao, "FlashAttention-2", 2023, Algorithm 2 (backward), split into a dK/dV and a dQ pass.
    """
    validate_backward(q, k, v, o, lse, do, block_m, block_n)
    kernels = BackwardKernels(*kernels)
    q, k, v, o, do, lse = (t.contiguous() for t in (q, k, v, o, do, lse))
    delta, dq, dk, dv, dq_acc = backward_buffers(q, block_m, block_n)
    return run_backward_kernels(kernels, q, k, v, o, lse, do, delta, dq, dk, dv, dq_acc, causal=causal,
                                block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages)


#: (block_m, block_n, num_warps, num_stages) per head dim, the fastest measured on an H200
#: (notes/gpu-measurements.md, 2026-11-30); other head dims use the launchers' defaults.
FORWARD_CONFIGS = MappingProxyType({64: (128, 64, 8, 3), 128: (128, 128, 8, 3)})
BACKWARD_CONFIGS = MappingProxyType({64: (32, 128, 4, 3), 128: (64, 128, 8, 3)})
_DEFAULT_CONFIG = (64, 64, 4, 2)


def _config(table, given, d: int, t: int) -> tuple[int, int, int, int]:
    """``given`` or the table's entry for head dim ``d``; block sizes capped to T's next power of two
    (at least 16), so that tiny inputs (the interpreter's tests) run in one tile."""
    import triton

    bm, bn, warps, stages = given or table.get(d, _DEFAULT_CONFIG)
    cap = max(16, triton.next_power_of_2(t))
    return min(bm, cap), min(bn, cap), warps, stages


def _torch_flash_forward(q, k, v, causal: bool, scale: float):
    """(o, lse) by PyTorch's own FlashAttention forward, or None where it does not apply.

    ``aten::_scaled_dot_product_flash_attention`` (CUDA: FlashAttention-2, sm80 and newer, D a
    multiple of 8 up to 256) and ``..._for_cpu`` return ``(output, logsumexp, ...)``: the output in
    q's dtype and the natural-log LSE as float32 (B, H, T) (the CPU one as a transposed view).
    """
    if q.dtype not in (torch.float16, torch.bfloat16):
        return None
    if q.device.type == "cuda":
        d = q.shape[-1]
        if torch.cuda.get_device_capability(q.device) < (8, 0) or d % 8 or d > 256:
            return None
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)[:2]
    elif q.device.type == "cpu":
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    else:
        return None
    return o, lse


def reference_forward(q, k, v, causal: bool = False, scale: float | None = None):
    """The forward notebook 07 gives: ``(o, lse)`` exactly as a FlashAttention-2 forward saves them.

    Args:
        q, k, v: (B, H, T, D) self-attention inputs, one dtype and device.
        causal: query i attends keys j <= i only (top-left aligned).
        scale: multiplies the scores; defaults to D ** -0.5.

    Returns:
        o: (B, H, T, D) in q's dtype, contiguous.
        lse: (B, H, T) float32, contiguous, the natural-log logsumexp of each row of scaled scores
        (Dao 2023, Algorithm 1 line 12), what :func:`launch_flash_backward` consumes.

    float16 and bfloat16 run PyTorch's own FlashAttention forward (on CUDA from sm80, or its CPU
    flash kernel); every other case (float32, older GPUs, head dims it rejects) runs
    :func:`attnlab.reference.naive_attention`, whose LSE is computed in float32 or wider. It is
    not a learner's kernel, so a mistake in notebook 05 never costs points in notebook 07.

    Raises:
        TypeError, ValueError: as :func:`attnlab.reference.validate_qkv`, or q and k of different shapes.
    """
    validate_qkv(q, k, v, where="reference_forward")
    if q.shape != k.shape:
        raise ValueError(f"reference_forward: self-attention only; q, k, v must all be (B, H, T, D), "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    out = _torch_flash_forward(q, k, v, causal, scale)
    if out is None:
        out = naive_attention(q, k, v, causal=causal, scale=scale)
    o, lse = out
    return o.contiguous(), lse.to(torch.float32).contiguous()


def attention_function(bwd_kernels, *, fwd_kernel=None, forward=None, backward=None):
    """A differentiable ``attention(q, k, v, causal=False) -> o`` from three backward kernels.

    Args:
        bwd_kernels: callable returning the (preprocess, dkdv, dq) kernels, looked up at every call
            (so a kernel redefined later in a notebook is the one used).
        fwd_kernel: callable returning a ``_flash_fwd_kernel`` (notebook 05's contract) to run the
            forward through :func:`attnlab.launch.launch_flash_forward`; None (the default): the
            forward is :func:`reference_forward`.
        forward, backward: (block_m, block_n, num_warps, num_stages) of each pass; by default the
            fastest measured for the head dim (:data:`FORWARD_CONFIGS`, :data:`BACKWARD_CONFIGS`).

    The forward saves (q, k, v, o, LSE); ``o.backward(do)`` runs :func:`launch_flash_backward`.
    Returns o in q's dtype; gradients flow to q, k and v. Neither pass reads a tensor value on the host:
    the forward and the backward (``torch.autograd.grad`` or ``o.backward``) on GPU tensors can be
    captured together in a CUDA graph and replayed, once a call outside the capture has compiled the
    kernels.
    """

    class _TritonAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            d, t = (q.shape[-1], q.shape[2]) if q.dim() == 4 else (0, 16)
            if fwd_kernel is None:
                o, lse = reference_forward(q, k, v, causal=causal)
            else:
                bm, bn, warps, stages = _config(FORWARD_CONFIGS, forward, d, t)
                o, lse = launch.launch_flash_forward(fwd_kernel(), q, k, v, causal=causal, block_m=bm, block_n=bn,
                                                     num_warps=warps, num_stages=stages)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.config = causal, _config(BACKWARD_CONFIGS, backward, d, t)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            bm, bn, warps, stages = ctx.config
            dq, dk, dv = launch_flash_backward(bwd_kernels(), q, k, v, o, lse, do.contiguous(),
                                               causal=ctx.causal, block_m=bm, block_n=bn,
                                               num_warps=warps, num_stages=stages)
            return dq, dk, dv, None

    def attention(q, k, v, causal=False):
        """Attention by the given forward (or ``fwd_kernel``) and your backward kernels; differentiable.
        Capturable in a CUDA graph, forward and backward (no value is read on the host)."""
        return _TritonAttention.apply(q, k, v, causal)

    return attention
