"""The given Triton launchers: validate input, allocate NaN-poisoned outputs, pick the grid, launch.

The notebooks wrap these around the learner's kernels (``triton_softmax`` and
``triton_flash_attention``), so a kernel is always launched the way the course's contract says:

- softmax: grid (n_rows,), one program per row, ``BLOCK_SIZE = next_power_of_2(n_cols)``;
- flash forward: grid (cdiv(T, BLOCK_M), B*H), contiguous (B, H, T, D) inputs, so
  ``stride_bh = T*D`` and ``stride_t = D``; LSE is float32 of shape (B, H, T).

Every public function here either computes the right result for the tensors it is given or
refuses them with an error that names the argument: a stride the kernel cannot follow, a device
the kernel does not run on, or bfloat16 under Triton's CPU interpreter (whose ``tl.dot`` and
arithmetic on bfloat16 are wrong).

Fast path and checking mode. A launcher call on GPU tensors never reads a tensor's values on the host
(that would make the host wait for the GPU, and cannot happen while a CUDA graph is captured), and
allocates its outputs with ``torch.empty``: every given launcher can be captured in a CUDA graph and
replayed. Inside :func:`checking` (entered by the course's checkers and the timing stage), and for
CPU tensors (Triton's interpreter, where a stray store could crash the Python process and the cost
is nothing beside the interpreter's), outputs start as NaN followed by spare elements (an element a
kernel never writes stays NaN; a store past the end lands in the spare room) and the values a
launcher can check on the host (``cache_seqlens`` of :mod:`attnlab.launch_decode`) are checked.
"""

from __future__ import annotations

import contextlib

import torch

from . import gpu_compile
from .core.device import is_interpreted, is_kernel, runnable_kernel

__all__ = ["launch_softmax", "run_softmax_kernel", "launch_flash_forward", "run_flash_kernel", "require_contiguous",
           "checking", "checks_on", "output"]

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def is_pow2(n) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


#: Device types whose memory the host reads without waiting for a GPU (tests set it to () to treat CPU
#: tensors as a GPU's, the launchers' fast path).
HOST_DEVICES = ("cpu",)
_CHECKING = [0]


@contextlib.contextmanager
def checking():
    """Inside this block the launchers poison their outputs and check values on the host (a GPU sync
    each): what a check that compares outputs, or looks for stores past the end, needs. Nests."""
    _CHECKING[0] += 1
    try:
        yield
    finally:
        _CHECKING[0] -= 1


def checks_on(device) -> bool:
    """True inside :func:`checking`, or for tensors in host memory (``device`` of type in
    :data:`HOST_DEVICES`): the launchers then NaN-poison outputs and read values to check them."""
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    return _CHECKING[0] > 0 or kind in HOST_DEVICES


def output(shape, extra: int, dtype, device) -> torch.Tensor:
    """A launcher's output buffer of ``shape``: NaN followed by ``extra`` spare elements
    (:func:`poisoned_with_tail`) where :func:`checks_on` holds, else ``torch.empty`` (the fast path:
    no fill kernel, nothing a CUDA graph cannot capture)."""
    if checks_on(device):
        return poisoned_with_tail(shape, extra, dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)


def poisoned_with_tail(shape, extra: int, dtype, device) -> torch.Tensor:
    """A NaN-filled contiguous tensor of ``shape`` followed in memory by ``extra`` spare elements.

    An output a kernel forgets to write stays NaN; a store that runs past the end (a missing mask)
    lands in the spare elements instead of corrupting other memory, which on the CPU interpreter
    could crash the whole Python process.
    """
    n = 1
    for size in shape:
        n *= size
    return torch.full((n + extra,), float("nan"), dtype=dtype, device=device)[:n].view(shape)


def require_contiguous(where: str, tensors: dict, why: str) -> None:
    """Raise ValueError naming the first of ``tensors`` (name -> tensor) that is not contiguous.

    For launchers whose kernel contract derives every stride from the shape (``why`` says how the
    kernel addresses the tensors): reading a transposed or sliced view with those strides would give
    wrong numbers without an error. The message gives the tensor's shape and strides and says to pass
    ``.contiguous()``.
    """
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and not t.is_contiguous():
            raise ValueError(f"{where}: {name} is not contiguous (strides {tuple(t.stride())}, shape "
                             f"{tuple(t.shape)}): {why}, so a view such as a transpose would be read wrong; "
                             f"pass {name}.contiguous()")


def _softmax_warps(block_size: int) -> int:
    # One row per program: wide rows need more threads to keep enough loads in flight.
    return 4 if block_size < 2048 else 8 if block_size < 8192 else 16


def _check_kernel_inputs(kernel, tensors: dict, where: str) -> bool:
    """One dtype among float16/bfloat16/float32, one device, and a device the kernel runs on.

    Returns True when a kernel compiled for the GPU is given CPU tensors: on a GPU machine the
    launch then runs the kernel through Triton's interpreter, as on a machine without a GPU."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    first = next(iter(tensors.values()))
    for name, t in tensors.items():
        if t.device != first.device:
            raise ValueError(f"{where}: all tensors must be on one device; {name} is on {t.device}, "
                             f"{next(iter(tensors))} on {first.device}")
    dtype = first.dtype
    if dtype not in KERNEL_DTYPES:
        raise TypeError(f"{where}: dtype {dtype} not supported; use float16, bfloat16 (GPU only) or float32")
    # a compiled-mode kernel here means a GPU machine: runnable_kernel converts it everywhere else
    on_cpu = first.device.type == "cpu" and not is_interpreted(kernel)
    if is_interpreted(kernel) or on_cpu:
        if first.device.type not in ("cpu", "cuda"):  # the interpreter reads raw addresses
            raise ValueError(f"{where}: tensors on {first.device} have no memory Triton's interpreter can "
                             f"read; use CPU tensors")
        if dtype == torch.bfloat16:
            raise TypeError(
                f"{where}: bfloat16 does not work under Triton's CPU interpreter (TRITON_INTERPRET=1): it "
                f"holds bfloat16 values as raw 16-bit integers, so tl.dot and arithmetic on them give "
                f"wrong numbers (off by ~1e9). Use float32 (or float16) on the CPU; bfloat16 runs on a GPU.")
    elif first.device.type != "cuda":
        raise ValueError(f"{where}: the tensors are on {first.device}, but Triton compiles this kernel for "
                         f"the GPU: move them to 'cuda', or to the CPU to run it through Triton's interpreter")
    return on_cpu


# ---------------------------------------------------------------------------------------- softmax
def require_kernel(kernel, what: str) -> None:
    """Raise TypeError unless ``kernel`` is exactly a ``@triton.jit`` function (:func:`attnlab.core.device.is_kernel`):
    anything else, a wrapper included, could run any Python when launched."""
    if not is_kernel(kernel):
        raise TypeError(f"{what} must be a @triton.jit function (exactly triton.runtime.jit.JITFunction), "
                        f"got {type(kernel).__qualname__}")


def prepare_kernel(kernel, what: str, tensors: dict, where: str):
    """The launchable form of a learner's ``kernel``, as every course launcher launches it.

    Exactly a ``@triton.jit`` function, converted for the interpreter when its cell ran before the
    set-up cell (:func:`attnlab.core.device.runnable_kernel`); ``tensors`` (name -> tensor) on one device
    and of a dtype this mode computes right (:func:`_check_kernel_inputs`); then wrapped so that the
    launch first compiles it for the course's GPU targets (:func:`attnlab.gpu_compile.gated`). On a
    GPU machine, CPU tensors run the kernel through Triton's interpreter, exactly as on a machine
    without a GPU (how the checks run their CPU-sized cases everywhere).

    Raises:
        TypeError: not a ``@triton.jit`` function, or a dtype this mode cannot compute right.
        ValueError: tensors on several devices, or on one the kernel cannot run on.
    """
    kernel = runnable_kernel(kernel)
    return gpu_compile.gated(kernel, what, interpret=_check_kernel_inputs(kernel, tensors, where))


def run_softmax_kernel(kernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Launch ``kernel`` on 2-D ``x`` into ``y`` as given: grid (n_rows,), BLOCK_SIZE the next power
    of two of n_cols. Rows may be further apart than n_cols (``x.stride(0)``, ``y.stride(0)``),
    but each row's columns must be adjacent in memory, as the kernel reads them.

    Args:
        kernel: a ``@triton.jit`` function with the ``_softmax_kernel`` signature.
        x: (n_rows, n_cols) float16, bfloat16 (GPU only) or float32; column stride 1.
        y: like ``x`` (same shape, dtype, device), column stride 1, rows that do not overlap.

    Returns:
        ``y``, written by the kernel.

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function; an unsupported dtype (bfloat16
            under the interpreter included).
        ValueError: shapes differ, a column stride is not 1, output rows overlap, or the device is
            not one the kernel runs on.

    Contract: ``attnlab.contracts.softmax_kernel``.
    """
    import triton

    kernel = prepare_kernel(kernel, "_softmax_kernel", {"x": x, "y": y}, "run_softmax_kernel")
    if x.dim() != 2 or y.shape != x.shape or y.dtype != x.dtype:
        raise ValueError(f"run_softmax_kernel: x and y must be 2-D of one shape and dtype, got x "
                         f"{tuple(x.shape)} {x.dtype} and y {tuple(y.shape)} {y.dtype}")
    n_rows, n_cols = x.shape
    for name, t in (("x", x), ("y", y)):
        if n_cols > 1 and t.stride(1) != 1:
            raise ValueError(f"run_softmax_kernel: {name} has strides {tuple(t.stride())} (shape "
                             f"{tuple(t.shape)}): the kernel reads "
                             f"the columns of a row as adjacent elements (column stride 1); pass "
                             f"{name}.contiguous() (for x; for y allocate a contiguous output)")
    if n_rows > 1 and y.stride(0) < n_cols:
        raise ValueError(f"run_softmax_kernel: rows of y overlap (row stride {y.stride(0)} < n_cols = "
                         f"{n_cols}): every program would write over its neighbour's row")
    block = triton.next_power_of_2(n_cols)
    kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=block,
                      num_warps=_softmax_warps(block))
    return y


def launch_softmax(kernel, x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor by ``kernel`` (the course's ``_softmax_kernel`` contract).

    Args:
        kernel: a ``@triton.jit`` function with signature
            ``(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE)``.
        x: (n_rows, n_cols) float16, bfloat16 (GPU only) or float32, any strides (a contiguous
            copy is taken when its columns are not adjacent).

    Returns:
        y: like ``x``, contiguous. Inside :func:`checking` and on the CPU it starts full of NaN, so
        any element the kernel does not write stays NaN (with one spare block after it, so an
        unmasked store cannot corrupt other memory); otherwise it is ``torch.empty``.

    Reads no tensor value on the host: a call on GPU tensors can be captured in a CUDA graph
    (``torch.cuda.graph``) and replayed, once a call outside the capture has compiled the kernel.

    Raises:
        TypeError: ``x`` is not a floating tensor of a supported dtype (bfloat16 under the
            interpreter included), or ``kernel`` is not a ``@triton.jit`` function.
        ValueError: ``x`` is not 2-D or has no columns.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"triton_softmax: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"triton_softmax: x must be 2-D (n_rows, n_cols), got shape {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError("triton_softmax: x has no columns")
    if x.dtype not in KERNEL_DTYPES:
        raise TypeError(f"triton_softmax: dtype {x.dtype} not supported; use float16, bfloat16 (GPU only) "
                        f"or float32")
    kernel = runnable_kernel(kernel)
    _check_kernel_inputs(kernel, {"x": x}, "triton_softmax")
    import triton

    x = x.contiguous()
    y = output(x.shape, triton.next_power_of_2(x.shape[1]), x.dtype, x.device)
    return run_softmax_kernel(kernel, x, y)


# ---------------------------------------------------------------------------------------- flash
def validate_blocks(d: int, block_m, block_n, where: str = "triton_flash_attention") -> None:
    """Raise ValueError unless the head dim and both tile sizes are powers of two >= 16."""
    if not is_pow2(d) or d < 16:
        raise ValueError(f"{where}: head dim D={d} must be a power of two >= 16 "
                         f"(tl.arange and tl.dot need it)")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if not is_pow2(b) or b < 16:
            raise ValueError(f"{where}: {name}={b!r} must be a power of two >= 16 "
                             f"(tl.arange needs a power of two; tl.dot needs at least 16)")


def validate_flash(q, k, v, block_m, block_n):
    from .reference import validate_qkv

    validate_qkv(q, k, v, where="triton_flash_attention")
    if q.shape != k.shape:
        raise ValueError(f"triton_flash_attention: this kernel does self-attention; q, k, v must all be "
                         f"(B, H, T, D), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.dtype not in KERNEL_DTYPES:
        raise TypeError(f"triton_flash_attention: dtype {q.dtype} not supported; "
                        f"use float16, bfloat16 (GPU only) or float32")
    validate_blocks(q.shape[-1], block_m, block_n)


def run_flash_kernel(kernel, q, k, v, o, lse, *, causal, block_m, block_n, num_warps=4, num_stages=2):
    """Launch ``kernel`` into the given ``o`` and ``lse``: grid (cdiv(T, block_m), B*H),
    ``stride_bh = T*D``, ``stride_t = D``, ``scale = D ** -0.5``.

    The kernel's contract has one pair of strides for Q, K, V and O, so all four must be
    contiguous (B, H, T, D) tensors of one shape; a transposed or sliced view is refused, never
    read with another tensor's strides.

    Args:
        kernel: a ``@triton.jit`` function with the ``_flash_fwd_kernel`` signature.
        q, k, v, o: contiguous (B, H, T, D), one dtype among float16, bfloat16 (GPU only), float32.
        lse: contiguous (B, H, T) float32.
        causal, block_m, block_n, num_warps, num_stages: as :func:`launch_flash_forward`.

    Returns:
        (o, lse), written by the kernel.

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function; an unsupported dtype.
        ValueError: a shape, stride (non-contiguous tensor), block size or device the kernel cannot use.

    Contract: ``attnlab.contracts.flash_fwd_kernel``.
    """
    import triton

    kernel = prepare_kernel(kernel, "_flash_fwd_kernel", {"q": q, "k": k, "v": v, "o": o}, "run_flash_kernel")
    validate_flash(q, k, v, block_m, block_n)
    B, H, T, D = q.shape
    if o.shape != q.shape or o.dtype != q.dtype:
        raise ValueError(f"run_flash_kernel: o must be {tuple(q.shape)} {q.dtype}, got {tuple(o.shape)} {o.dtype}")
    if not isinstance(lse, torch.Tensor) or lse.shape != (B, H, T) or lse.dtype != torch.float32 \
            or lse.device != q.device:
        got = f"{tuple(lse.shape)} {lse.dtype} on {lse.device}" if isinstance(lse, torch.Tensor) else type(lse).__name__
        raise ValueError(f"run_flash_kernel: lse must be ({B}, {H}, {T}) float32 on {q.device}, got {got}")
    require_contiguous("run_flash_kernel", {"q": q, "k": k, "v": v, "o": o, "lse": lse},
                       "the kernel addresses every tensor with stride_bh = T*D and stride_t = D")
    grid = (triton.cdiv(T, block_m), B * H)
    # strides from the shape, not from q.stride(): torch leaves the stride of a size-1 dim arbitrary
    kernel[grid](q, k, v, o, lse, T * D, D, T, D ** -0.5,
                 CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=D,
                 num_warps=num_warps, num_stages=num_stages)
    return o, lse


def launch_flash_forward(kernel, q, k, v, causal=False, block_m=64, block_n=64, num_warps=4, num_stages=2):
    """FlashAttention forward by ``kernel`` (the course's ``_flash_fwd_kernel`` contract).

    Args:
        kernel: a ``@triton.jit`` function with signature ``(Q, K, V, O, LSE, stride_bh, stride_t, T,
            scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)``.
        q, k, v: (B, H, T, D), any strides, one dtype among float16, bfloat16 (GPU only), float32,
            on one device; D a power of two >= 16. Made contiguous, so ``stride_bh = T*D`` and
            ``stride_t = D``.
        causal: top-left aligned causal mask (query i sees keys j <= i).
        block_m, block_n: query and key tile sizes, powers of two >= 16.
        num_warps, num_stages: passed to Triton (ignored by the interpreter).

    Returns:
        o: (B, H, T, D) in q's dtype; lse: (B, H, T) float32, natural log. Inside :func:`checking` and
        on the CPU both start as NaN and are followed by room for one padded tile of rows, so an
        unmasked store cannot corrupt other memory; otherwise they are ``torch.empty``.

    Reads no tensor value on the host: a call on GPU tensors can be captured in a CUDA graph
    (``torch.cuda.graph``) and replayed, once a call outside the capture has compiled the kernel.

    Raises:
        TypeError, ValueError: naming the argument that is wrong (see ``validate_qkv`` too).
    """
    validate_flash(q, k, v, block_m, block_n)
    kernel = runnable_kernel(kernel)
    _check_kernel_inputs(kernel, {"q": q, "k": k, "v": v}, "triton_flash_attention")
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = output(q.shape, block_m * q.shape[-1], q.dtype, q.device)
    lse = output(q.shape[:3], block_m, torch.float32, q.device)
    return run_flash_kernel(kernel, q, k, v, o, lse, causal=causal, block_m=block_m, block_n=block_n,
                            num_warps=num_warps, num_stages=num_stages)
