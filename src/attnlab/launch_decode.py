"""The given launcher of notebook 08: split-K decoding (FlashDecoding) from two Triton kernels.

The learner writes the kernels; these functions validate the inputs, pick the split count and tile
sizes, allocate the partials and outputs (NaN-poisoned when checking: :func:`attnlab.launch.checking`),
and launch:

- ``partial`` on grid (B·H_kv, num_splits, row_blocks): one program per (sequence, KV head), slice of keys
  and block of query rows, the rows being all (query head of the group, new query) pairs of that KV head,
  so a K/V tile is loaded once for the whole group (contract: ``attnlab.contracts.decode_partial_kernel``);
- ``merge`` on grid (B·H_q·T_q,) (contract: ``attnlab.contracts.decode_merge_kernel``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

from . import gpu_compile
from .launch import KERNEL_DTYPES, checks_on, is_pow2, output, prepare_kernel, require_contiguous
from .reference_decode import validate_decode_inputs

__all__ = ["choose_num_splits", "DecodeConfig", "decode_config", "partial_programs_per_sm", "launch_config",
           "run_decode_partial", "run_decode_merge", "shared_memory_error", "launch_flash_decode"]

#: SMs assumed under the interpreter (no GPU to ask): small, so CPU runs stay quick.
INTERPRETER_SMS = 4
# Triton's num_stages for the split kernel: the launcher's default and the checkers' (one value, so a
# learner's kernel is checked as flash_decode launches it). 2 rather than 3: up to 10% faster on an H200,
# and less shared memory.
NUM_STAGES = 2


# ----------------------------------------------------------------------------------- split count
#: Programs of the split kernel one SM runs at once when the GPU cannot be asked (on the CPU): what
#: notebook 08's kernel gets at D=128 on an H200 (114 registers a thread allow 4 programs of 4 warps).
PER_SM_DEFAULT = 4


def choose_num_splits(programs_per_split: int, n_keys: int, n_sm: int, *, block_n: int = 64,
                      per_sm: int = PER_SM_DEFAULT, min_keys_per_split: int = 128, max_splits: int = 128) -> int:
    """How many slices to cut the keys into, so that the programs fill the GPU in whole waves.

    An SM runs ``per_sm`` programs at once (as many as its registers, shared memory and threads hold),
    so programs run in waves of ``n_sm · per_sm``; a last wave only partly full leaves SMs idle while it
    finishes (the tail effect). The count is chosen near the one that fills one wave, between 2/3 and
    3/2 of it, as the one whose last wave is fullest (to 1%; ties: the nearest, then the fewer). On an
    H200 (B 1/8, H_kv 8/32, 4k to 128k keys, D=128, bf16, from CUDA graphs; notes/gpu/2026-12-02/session5)
    a split-K step ran at 0.97-1.01 of SDPA's speed with 512 or 528 programs (one wave of 132 · 4) and at
    0.86-0.92 with 768 to 800 (one and a half): it is the waves of resident programs that count, not
    those of one program per SM.

    Args:
        programs_per_split: programs one slice launches, B · H_kv · (query-row blocks).
        n_keys: keys in the cache (T_max).
        n_sm: streaming multiprocessors of the device.
        per_sm: programs one SM runs at once (:func:`attnlab.gpu_compile.programs_per_sm` of the compiled
            kernel; :data:`PER_SM_DEFAULT` where unknown).
        min_keys_per_split: below this a slice's fixed costs (loading q, writing a partial, merging)
            outweigh its keys. 128 (two tiles): at B=1, H_kv=8 and 4k keys, 64 slices of 64 keys ran at
            1.02 of SDPA's speed and 16 of 256 at 0.93 (notes/gpu/2026-12-04/session12).

    Returns:
        The split count, capped so that each slice keeps ``min_keys_per_split`` keys (at least one
        ``block_n`` tile) and at ``max_splits``; at least 1.
    """
    cap = max(1, min(max_splits, n_keys // max(min_keys_per_split, block_n)))
    per_split = max(1, programs_per_split)
    slots = max(1, n_sm) * max(1, per_sm)
    wanted = math.ceil(slots / per_split)
    low, high = max(1, math.ceil(wanted * 2 / 3)), min(cap, wanted * 3 // 2)
    if high < low:
        return max(1, min(wanted, cap))

    def last_wave_fill(splits: int) -> float:
        programs = splits * per_split
        return round(programs / (math.ceil(programs / slots) * slots), 2)

    return max(range(low, high + 1), key=lambda s: (last_wave_fill(s), -abs(s - wanted), -s))


@dataclass(frozen=True)
class DecodeConfig:
    """How the launcher cuts the work: tiles, splits and the grids of the two kernels."""

    block_m: int
    block_n: int
    num_splits: int
    keys_per_split: int
    row_blocks: int

    def partial_grid(self, B: int, H_kv: int) -> tuple[int, int, int]:
        """(B·H_kv, num_splits, row_blocks): one program per (sequence, KV head), slice and block of rows."""
        return (B * H_kv, self.num_splits, self.row_blocks)


def _sm_count(device) -> int:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SMS


def decode_config(q, k_cache, num_splits: int | None = None, block_n: int | None = None, *,
                  per_sm: int | None = None) -> DecodeConfig:
    """The launcher's choices for these shapes.

    block_m: the rows one program handles, all (query head of the group, new query) pairs of one KV
    head: ``max(16, next_pow2(group · T_q))``, at most 64 (more rows take more row blocks).
    block_n: 64 on a GPU, 16 under the interpreter. num_splits: None picks :func:`choose_num_splits`
    for ``per_sm`` programs per SM (:func:`partial_programs_per_sm`; None: :data:`PER_SM_DEFAULT`).
    keys_per_split: ``cdiv(T_max, num_splits)`` rounded up to a multiple of block_n, so a slice is whole
    tiles (the last slices may be short or empty).

    Raises:
        ValueError: ``num_splits`` or ``block_n`` is not valid.
    """
    B, H_q, T_q, D = q.shape
    H_kv, T_max = k_cache.shape[1], k_cache.shape[2]
    rows = (H_q // H_kv) * T_q
    block_m = min(64, max(16, 1 << (rows - 1).bit_length()))
    if block_n is None:
        block_n = 16 if q.device.type == "cpu" else 64
    if not is_pow2(block_n) or block_n < 16:
        raise ValueError(f"flash_decode: block_n={block_n!r} must be a power of two >= 16")
    row_blocks = -(-rows // block_m)
    if num_splits is None:
        num_splits = choose_num_splits(B * H_kv * row_blocks, T_max, _sm_count(q.device), block_n=block_n,
                                       per_sm=per_sm or PER_SM_DEFAULT)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"flash_decode: num_splits must be a positive int or None, got {num_splits!r}")
    per = -(-T_max // num_splits)
    keys_per_split = -(-per // block_n) * block_n
    return DecodeConfig(block_m, block_n, num_splits, keys_per_split, row_blocks)


# ---------------------------------------------------------------------------------------- launcher
def _kv_strides(k_cache, v_cache):
    """K and V as the kernel reads them: one set of (batch, head, position) strides, last dim contiguous."""
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
    return k_cache, v_cache


def _require_kv_strides(where: str, k_cache, v_cache) -> None:
    """Raise ValueError unless v_cache has k_cache's strides and both have a contiguous last dim."""
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{where}: {name} has strides {tuple(t.stride())} (shape {tuple(t.shape)}): the "
                             f"kernel reads a key's D values as adjacent elements (last stride 1); pass {name}.contiguous()")
    # a dim of size 1 is never stepped over, so its stride may differ
    if any(n > 1 and sk != sv for n, sk, sv in zip(k_cache.shape, k_cache.stride(), v_cache.stride())):
        raise ValueError(f"{where}: v_cache has strides {tuple(v_cache.stride())} (shape {tuple(v_cache.shape)}), "
                         f"k_cache {tuple(k_cache.stride())}: the kernel reads both with k_cache's strides; pass "
                         f"k_cache.contiguous() and v_cache.contiguous()")


def run_decode_partial(kernel, q, k_cache, v_cache, cache_seqlens, o_part, lse_part, *, causal: bool,
                       cfg: DecodeConfig, num_warps: int = 4, num_stages: int = NUM_STAGES):
    """Launch the split kernel on grid ``cfg.partial_grid(B, H_kv)`` into o_part (B, H_q, T_q, S, D)
    and lse_part (B, H_q, T_q, S), both float32 and contiguous; q contiguous; K and V share strides.

    Kernel arguments, in order: ``Q, K, V, SEQLENS, O_PART, LSE_PART, stride_kb, stride_kh, stride_kt,
    H_kv, group, T_q, keys_per_split, num_splits, scale`` and the constexprs ``CAUSAL, BLOCK_M, BLOCK_N,
    HEAD_DIM``.

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function.
        ValueError: q, cache_seqlens, o_part or lse_part is not contiguous, or v_cache's strides differ
            from k_cache's or either's last dim is not contiguous (the kernel gets k_cache's strides only);
            or, on a GPU, the tiles need more shared memory than a program may have (large D), named with
            the bytes needed and the device's limit.

    Contract: ``attnlab.contracts.decode_partial_kernel``.
    """
    kernel = prepare_kernel(kernel, "_decode_partial_kernel", {"q": q, "k_cache": k_cache, "v_cache": v_cache},
                            "flash_decode")
    _require_kv_strides("run_decode_partial", k_cache, v_cache)
    require_contiguous("run_decode_partial",
                       {"q": q, "cache_seqlens": cache_seqlens, "o_part": o_part, "lse_part": lse_part},
                       "the kernel addresses q, the lengths and the partials by their shapes (only the caches "
                       "come with strides)")
    _launch_partial(kernel, q, k_cache, v_cache, cache_seqlens, o_part, lse_part, causal, cfg, num_warps, num_stages)
    return o_part, lse_part


def _launch_partial(kernel, q, k_cache, v_cache, cache_seqlens, o_part, lse_part, causal, cfg, num_warps,
                    num_stages):
    """The split kernel's launch, its arguments in the contract's order; returns what the launch returns
    (Triton's CompiledKernel inside :func:`attnlab.gpu_compile.compile_only`)."""
    B, H_q, T_q, D = q.shape
    H_kv = k_cache.shape[1]
    try:
        return kernel[cfg.partial_grid(B, H_kv)](
            q, k_cache, v_cache, cache_seqlens, o_part, lse_part,
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            H_kv, H_q // H_kv, T_q, cfg.keys_per_split, cfg.num_splits, D ** -0.5,
            CAUSAL=bool(causal), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HEAD_DIM=D,
            num_warps=num_warps, num_stages=num_stages)
    except Exception as exc:
        too_big = shared_memory_error(exc, D=D, cfg=cfg, num_stages=num_stages)
        if too_big is not None:
            raise too_big from exc
        raise


#: partial_programs_per_sm's answers: kernel -> {what its compiled code depends on: programs per SM}. Weak
#: on the kernel, so a kernel redefined in a notebook takes its entries (and its loaded module) with it.
_PER_SM: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compiled_key(q, k_cache, cache_seqlens, causal: bool, cfg: DecodeConfig, num_warps: int, num_stages: int) -> tuple:
    """What the split kernel's compiled code depends on, the split count aside: the dtypes, D, the integer
    arguments as Triton specialises them (equal to 1, divisible by 16), the tiles, the causal flag and the
    launch options."""
    ints = (*k_cache.stride()[:3], k_cache.shape[1], q.shape[1] // k_cache.shape[1], q.shape[2])
    return (q.device, q.dtype, k_cache.dtype, cache_seqlens.dtype, q.shape[-1], tuple((i == 1, i % 16 == 0) for i in ints),
            cfg.block_m, cfg.block_n, bool(causal), num_warps, num_stages)


def partial_programs_per_sm(kernel, q, k_cache, v_cache, cache_seqlens, *, causal: bool, block_n: int | None = None,
                            num_warps: int = 4, num_stages: int = NUM_STAGES) -> int | None:
    """Programs of the split kernel one SM of q's GPU runs at once, as launched with these options.

    The kernel is compiled as :func:`run_decode_partial` launches it, with the split count of
    :data:`PER_SM_DEFAULT` (nothing runs), and the CUDA driver's occupancy calculator is asked
    (:func:`attnlab.gpu_compile.programs_per_sm`). The answer is remembered per kernel and what its
    compiled code depends on (the split count changes no register), so later calls cost a dictionary
    lookup and never sync with the GPU.

    Returns:
        The count; None on the CPU (the interpreter has no SMs to fill), where the driver cannot say
        (a kernel too large to load: its launch then raises :func:`shared_memory_error`'s message), or
        when nothing is remembered yet and the call is inside :func:`attnlab.gpu_compile.captured` or a
        CUDA graph capture (which must not compile or load a module).

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function; ValueError: as :func:`run_decode_partial`
        for its inputs.
    """
    if q.device.type != "cuda":
        return None
    k_cache, v_cache = _kv_strides(k_cache, v_cache)
    cfg = decode_config(q, k_cache, None, block_n)
    key = _compiled_key(q, k_cache, cache_seqlens, causal, cfg, num_warps, num_stages)
    try:
        known = _PER_SM.setdefault(kernel, {})
    except Exception:  # noqa: BLE001  (not a kernel, or Triton cannot hash its source: prepare_kernel and
        known = {}     # the gate below name what is wrong, as they do for a launch)
    if key not in known:
        if gpu_compile.capturing() or torch.cuda.is_current_stream_capturing():
            return None
        gated = prepare_kernel(kernel, "_decode_partial_kernel", {"q": q, "k_cache": k_cache, "v_cache": v_cache},
                               "flash_decode")
        compiler = gpu_compile.gated(gated.kernel, gated.what, gated.interpret, compile_only=True)
        part = torch.empty(1, device=q.device, dtype=torch.float32)  # compiled as for any partials buffer
        compiled = _launch_partial(compiler, q.contiguous(), k_cache, v_cache, cache_seqlens.contiguous(), part,
                                   part, causal, cfg, num_warps, num_stages)
        known[key] = gpu_compile.programs_per_sm(compiled)
    return known[key]


def launch_config(partial_kernel, q, k_cache, v_cache, cache_seqlens, *, causal: bool, num_splits: int | None = None,
                  block_n: int | None = None, num_warps: int = 4, num_stages: int = NUM_STAGES) -> DecodeConfig:
    """What :func:`launch_flash_decode` launches: :func:`decode_config`, its split count (when
    ``num_splits`` is None) chosen for the programs this GPU runs at once (:func:`partial_programs_per_sm`)."""
    per_sm = None if num_splits is not None else partial_programs_per_sm(
        partial_kernel, q, k_cache, v_cache, cache_seqlens, causal=causal, block_n=block_n, num_warps=num_warps,
        num_stages=num_stages)
    return decode_config(q, k_cache, num_splits, block_n, per_sm=per_sm)


def shared_memory_error(exc: Exception, *, D: int, cfg: DecodeConfig, num_stages: int) -> ValueError | None:
    """Triton's OutOfResources for shared memory (raised when the compiled kernel is loaded, before it
    runs) as a ValueError naming the head dim, the tiles, the bytes needed and the device's limit, with
    the smaller options to pass; None for any other exception."""
    if type(exc).__name__ != "OutOfResources" or getattr(exc, "name", None) != "shared memory":
        return None
    smaller = [f"block_n={cfg.block_n // 2}"] * (cfg.block_n > 16) + [f"num_stages={num_stages - 1}"] * (num_stages > 1)
    return ValueError(
        f"flash_decode: head dim D={D} with block_n={cfg.block_n}, block_m={cfg.block_m} and num_stages={num_stages} "
        f"needs {exc.required:,} bytes of shared memory per program; this GPU allows {exc.limit:,}. The K and V "
        f"tiles grow with D" + (f": pass {' or '.join(smaller)}" if smaller else ""))


def run_decode_merge(kernel, o_part, lse_part, o, lse, *, num_warps: int = 4):
    """Launch the merge kernel on grid (B·H_q·T_q,): one program per query row, all its splits at once.

    Kernel arguments: ``O_PART, LSE_PART, O, LSE, num_splits`` and the constexprs ``BLOCK_S``
    (next power of two >= num_splits) and ``HEAD_DIM``.

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function.
        ValueError: a tensor that is not contiguous (the kernel addresses all four by their shapes).

    Contract: ``attnlab.contracts.decode_merge_kernel``.
    """
    import triton

    kernel = prepare_kernel(kernel, "_decode_merge_kernel", {"o_part": o_part, "lse_part": lse_part, "lse": lse},
                            "flash_decode")
    require_contiguous("run_decode_merge", {"o_part": o_part, "lse_part": lse_part, "o": o, "lse": lse},
                       "the kernel addresses the partials and outputs by their shapes (row r's splits at r*S)")
    S, D = o_part.shape[-2], o_part.shape[-1]
    n_rows = lse.numel()
    kernel[(n_rows,)](o_part, lse_part, o, lse, S, BLOCK_S=max(2, triton.next_power_of_2(S)),
                      HEAD_DIM=D, num_warps=num_warps)
    return o, lse


def launch_flash_decode(partial_kernel, merge_kernel, q, k_cache, v_cache, cache_seqlens, causal: bool = True,
                        num_splits: int | None = None, *, block_n: int | None = None, num_warps: int = 4,
                        num_stages: int = NUM_STAGES):
    """Split-K decoding by the two kernels: ``flash_decode(q, k_cache, v_cache, cache_seqlens, causal, num_splits)``.

    Args:
        partial_kernel, merge_kernel: ``@triton.jit`` functions with the signatures of
            :func:`run_decode_partial` and :func:`run_decode_merge`.
        q: (B, H_q, T_q, D); k_cache, v_cache: (B, H_kv, T_max, D); float16, bfloat16 or float32 on one
            device; D a power of two >= 16 (on an H200 D=256 and D=512 run with the defaults; a D whose
            tiles do not fit in shared memory raises ValueError: notes/gpu/2026-12-02/session5); H_q a
            multiple of H_kv. q is made contiguous; the caches are
            used in place when they share strides and their last dim is contiguous (no copy of the cache).
        cache_seqlens: int32 (B,), values in [0, T_max] (checked on the CPU and inside
            :func:`attnlab.launch.checking`; on a GPU otherwise not, since reading them makes the host wait).
        causal: bottom-right aligned (query i sees keys j <= cache_seqlens[b] - T_q + i).
        num_splits: slices of the keys; None picks :func:`choose_num_splits` from the SM count and the
            programs an SM runs at once (:func:`partial_programs_per_sm`).
        block_n, num_warps, num_stages: tile of keys and Triton launch options (see :func:`decode_config`;
            num_stages defaults to :data:`NUM_STAGES`, which the checkers use too).

    Returns:
        o: (B, H_q, T_q, D) in q's dtype (0 for rows with no visible key); lse: (B, H_q, T_q) float32,
        natural log (-inf for those rows). Inside :func:`attnlab.launch.checking` and on the CPU, outputs
        and partials start as NaN, each followed by spare memory, so an element never written fails a
        test and a stray store corrupts nothing; otherwise they are ``torch.empty``.

    Reads no tensor value on the host (``num_splits=None`` asks the device for its SM count and, once per
    kernel and launch options, the driver for the kernel's occupancy): a
    call on GPU tensors can be captured in a CUDA graph and replayed, once a call outside the capture
    has compiled the kernels. Inference engines replay their decoding step that way.

    Raises:
        TypeError, ValueError: naming the argument that is wrong.
    """
    validate_decode_inputs(q, k_cache, v_cache, cache_seqlens, values=checks_on(cache_seqlens.device))
    if q.dtype not in KERNEL_DTYPES:
        raise TypeError(f"flash_decode: dtype {q.dtype} not supported; use float16, bfloat16 or float32")
    D = q.shape[-1]
    if not is_pow2(D) or D < 16:
        raise ValueError(f"flash_decode: head dim D={D} must be a power of two >= 16 (tl.arange and tl.dot need it)")
    cfg = launch_config(partial_kernel, q, k_cache, v_cache, cache_seqlens, causal=causal, num_splits=num_splits,
                        block_n=block_n, num_warps=num_warps, num_stages=num_stages)
    q, cache_seqlens = q.contiguous(), cache_seqlens.contiguous()
    k_cache, v_cache = _kv_strides(k_cache, v_cache)
    B, H_q, T_q, _ = q.shape
    dev = q.device
    spare = cfg.block_m * cfg.num_splits  # partial rows of one padded block of rows
    o_part = output((B, H_q, T_q, cfg.num_splits, D), spare * D, torch.float32, dev)
    lse_part = output((B, H_q, T_q, cfg.num_splits), spare, torch.float32, dev)
    o = output(q.shape, D, q.dtype, dev)
    lse = output((B, H_q, T_q), 1, torch.float32, dev)
    run_decode_partial(partial_kernel, q, k_cache, v_cache, cache_seqlens, o_part, lse_part, causal=causal,
                       cfg=cfg, num_warps=num_warps, num_stages=num_stages)
    return run_decode_merge(merge_kernel, o_part, lse_part, o, lse)
