"""Checkers of notebook 08 (split-K decoding): the split kernel, the merge kernel, and both together.

Each draws seeded inputs, launches the learner's kernels the way the given ``flash_decode`` does
(:mod:`attnlab.launch_decode`), and compares with the float64 references of :mod:`attnlab.reference_decode`:

- the caches hold NaN past every sequence's length, so a kernel that reads V there (or uses a key
  it must not see) gets NaN in its output;
- outputs and partials start as NaN and are followed by guard values: an element never written
  stays NaN, a store past the end changes a guard;
- rows and splits that see no key must give exactly O = 0 and LSE = -inf (NaN fails);
- the split kernel's checker can hand over a transposed cache (``kv_layout="bthd"``), so a kernel
  that assumes contiguous strides fails;
- a top-left causal mask, and a merge that overflows exp(LSE_s), are named (:mod:`attnlab.checking.hints`);
- under Triton's interpreter the split kernel's accesses are recorded in the work ledger, atomics
  as reads (:func:`attnlab.checking.loads.check_decode_reads`, then the cost model
  :func:`attnlab.checking.work_models.decode_partial_model`): each program reads its own (sequence, KV head)
  and slice, nothing at or past the sequence's length, each K/V element once for all query heads
  of its GQA group, in tiles of at most BLOCK_N keys, with the products through ``tl.dot``. Only the split kernel's checker does this, so a kernel that reloads K/V per
  query head loses that checker's points, not the end-to-end ones as well.
"""
# Length: one job, notebook 08's four checkers (split, merge, both, large offsets); the steps they share with
# the other notebooks' checkers are in checking/harness.py.

from __future__ import annotations

import torch

from . import launch_decode, reference_decode
from .checks import Case, assert_close, assert_shape, generator, randn, tolerance
from .core.device import runtime
from .checking.hints import quiet, alignment_sentence, diagnosed, matches_with_empty, merge_overflow_hint, merge_weights_hint, past_length_hint, rescale_hint
from .checking.loads import check_decode_reads, check_races
from .checking.poisoned import guarded, tail_room, with_tail
from .checking.harness import KernelCheck, Tail, call_learner, check_kernel, kernel_device
from .checking.work_models import check_work, decode_merge_model, decode_partial_model

__all__ = ["check_decode_partial_kernel", "check_decode_merge_kernel", "check_flash_decode",
           "check_decode_partial_large_offsets", "top_left_hint"]


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _past_the_end(what: str, case, hint: str) -> str:
    return f"{what} [{case}]: wrote past the end of its output: {hint}"


def _merge_tails(o_buf, o, lse_buf, lse, case) -> tuple[Tail, Tail]:
    """The guard values after the merge kernel's O and LSE."""
    return (Tail(o_buf, o.numel(), _past_the_end("_decode_merge_kernel", case, "store one row of D values per program")),
            Tail(lse_buf, lse.numel(), _past_the_end("_decode_merge_kernel", case, "store one LSE per program")))


#: Why a row or split whose keys are visible came out -inf, for the kernels that loop over keys.
KEYS_MISSED = ("-inf means no key was visible to that row: is the causal bound inclusive (key j is visible when "
               "j <= seqlens[b] - T_q + i, its own position included), and does the loop cover the slice's keys?")
#: The same for the merge kernel, which sees no keys, only the splits' LSEs.
SPLITS_MISSED = ("-inf means the merge found no split with keys for that row, though one had a finite LSE_s: "
                 "the merged LSE is m + log(Σ_s exp(LSE_s − m)) with m = max_s LSE_s, where only splits with "
                 "LSE_s = -inf weigh 0.")


def assert_close_or_empty(actual, expected: torch.Tensor, *, name: str, case, tol: float,
                          no_keys: str = KEYS_MISSED) -> None:
    """Like :func:`attnlab.checks.assert_close`, where ``expected`` may hold -inf (a row or split with
    no visible key): ``actual`` must be exactly -inf there and finite everywhere else.

    Raises:
        AssertionError: naming the first wrong element; a -inf where a finite value was expected is
            explained by ``no_keys`` (:data:`KEYS_MISSED`, or :data:`SPLITS_MISSED` for the merge).
    """
    assert_shape(actual, expected.shape, name=name, case=case)
    a = actual.detach().to(device="cpu", dtype=torch.float64)
    empty = torch.isneginf(expected)
    for bad, want in ((empty & ~torch.isneginf(a), "-inf: this row sees no key here"),
                      (~empty & ~torch.isfinite(a), "a finite value")):
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            got = a[idx].item()
            if got == float("-inf"):  # a row that should see keys saw none
                why = no_keys
            else:
                why = ("NaN usually means an element was never written or exp(-inf - (-inf)) was computed for "
                       "a row with no visible key.")
            raise AssertionError(
                f"{name} [{case}]: {int(bad.sum())} of {a.numel()} elements are wrong; first at index {idx}: "
                f"got {got}, expected {want}. {why}")
    assert_close(a.masked_fill(empty, 0.0), expected.to(torch.float64).masked_fill(empty, 0.0),
                 name=name, case=case, tol=tol)


#: How a checker may store the caches: (B, H_kv, T_max, D) contiguous, or a (B, T_max, H_kv, D) buffer
#: seen as (B, H_kv, T_max, D) by a transpose (as many inference engines keep it). The launcher passes
#: both without a copy, so only the second shows a kernel that assumes contiguous strides.
KV_LAYOUTS = ("bhtd", "bthd")


def _cache_inputs(seqlens, *, H_q, H_kv, T_q, T_max, D, seed, dtype, device, spare, kv_layout="bhtd"):
    """q, k_cache, v_cache (NaN past each length, NaN-tailed; laid out as ``kv_layout``) on ``device``,
    their float64 CPU copies, the lengths, and the three whole buffers (for the load accounting)."""
    B = len(seqlens)
    lens = torch.tensor(list(seqlens), dtype=torch.int32)
    q = randn(B, H_q, T_q, D, seed=seed)
    k = randn(B, H_kv, T_max, D, seed=seed + 1)
    v = randn(B, H_kv, T_max, D, seed=seed + 2)
    past = ~reference_decode.keys_in_cache(T_max, lens)  # (B, 1, T_max, 1)
    k, v = (t.masked_fill(past, float("nan")) for t in (k, v))
    if kv_layout not in KV_LAYOUTS:
        raise ValueError(f"kv_layout must be one of {KV_LAYOUTS}, got {kv_layout!r}")
    # "bthd": stored as (B, T_max, H_kv, D), handed over as its (B, H_kv, T_max, D) transpose
    swap = (lambda t: t.transpose(1, 2)) if kv_layout == "bthd" else (lambda t: t)
    dev, bufs = zip(*(with_tail(t.to(device=device, dtype=dtype), spare) for t in (q, swap(k), swap(v))))
    dev = (dev[0], swap(dev[1]), swap(dev[2]))
    exact = tuple(t.to(torch.float64).cpu() for t in dev)  # what the kernel sees, rounded to dtype
    return dev, exact, lens, bufs


def top_left_hint(reference, outputs, tol: float):
    """A hint (for :func:`attnlab.checking.hints.diagnosed`): every one of ``outputs`` equals what ``reference``
    (a function of ``align``) gives with the causal mask aligned top-left instead of bottom-right.
    Quiet like every hint: an error inside it gives "", never replacing the failure it explains."""
    @quiet
    def hint() -> str:
        if all(matches_with_empty(got, want, tol) for got, want in zip(outputs, reference(align="top-left"))):
            return alignment_sentence("top-left", "bottom-right", "Your kernel's result")
        return ""
    return hint


def _case(seqlens, H_q, H_kv, T_q, T_max, D, causal, cfg, dtype, num_splits_given):
    return Case(B=len(seqlens), H_q=H_q, H_kv=H_kv, T_q=T_q, T_max=T_max, D=D, seqlens=list(seqlens),
                causal=causal, num_splits=cfg.num_splits if num_splits_given else f"None->{cfg.num_splits}",
                keys_per_split=cfg.keys_per_split, block_n=cfg.block_n, dtype=_dtype_name(dtype))


def _setup(seqlens, H_q, H_kv, T_q, T_max, D, causal, num_splits, block_n, dtype, seed, device,
           kv_layout="bhtd"):
    device = device or runtime().device
    T_max = max(seqlens) + 3 if T_max is None else T_max
    B = len(seqlens)
    cfg = launch_decode.decode_config(torch.empty(B, H_q, T_q, D, device=device),
                               torch.empty(B, H_kv, T_max, D, device="meta"), num_splits, block_n)
    (q, k, v), exact, lens, bufs = _cache_inputs(seqlens, H_q=H_q, H_kv=H_kv, T_q=T_q, T_max=T_max, D=D,
                                                 seed=seed, dtype=dtype, device=device,
                                                 spare=cfg.keys_per_split * D, kv_layout=kv_layout)
    case = _case(seqlens, H_q, H_kv, T_q, T_max, D, causal, cfg, dtype, num_splits is not None)
    if kv_layout != "bhtd":
        case = Case(case, kv_layout=f"{kv_layout} (strides {tuple(k.stride())[:3]})")
    return device, T_max, cfg, (q, k, v), exact, lens.to(device), case, bufs


def check_decode_partial_kernel(kernel, *, seqlens, H_q: int = 2, H_kv: int = 2, T_q: int = 1, D: int = 16,
                                T_max: int | None = None, causal: bool = True, num_splits: int | None = None,
                                block_n: int | None = None, dtype=torch.float32, seed: int = 0,
                                num_warps: int = 4, num_stages: int = launch_decode.NUM_STAGES, device: str | None = None,
                                kv_layout: str = "bhtd"):
    """Check a ``_decode_partial_kernel`` alone: every (query row, split) partial O and LSE.

    Args:
        seqlens: valid keys per sequence (B = len(seqlens)); T_max defaults to max(seqlens) + 3, so
            every sequence has NaN keys after its end.
        H_q, H_kv: query and KV heads (H_q a multiple of H_kv); T_q: new queries per sequence.
        num_splits, block_n: as the launcher takes them (None: its rule for
            :data:`attnlab.launch_decode.PER_SM_DEFAULT` programs per SM, on any device, so the case does
            not depend on the GPU's occupancy).
        kv_layout: ``"bhtd"`` (contiguous caches) or ``"bthd"`` (a (B, T_max, H_kv, D) buffer seen through a
            transpose: stride_kt = H_kv·D, stride_kh = D), which the launcher passes without a copy.

    Under the interpreter every load is accounted (:func:`attnlab.checking.loads.check_decode_reads`).

    Raises:
        AssertionError: naming the case, the quantity (``o_part``/``lse_part``) and the first wrong
            index, or the load rule broken (a K/V element loaded twice by one program: not once per
            GQA group; a key past the sequence's length or outside the program's slice).

    Contract: ``attnlab.contracts.decode_partial_kernel``.
    """
    T_max = max(seqlens) + 3 if T_max is None else T_max
    device, accounted = kernel_device(device, dtype=dtype, elements=len(seqlens) * H_q * T_q * T_max)
    device, T_max, cfg, (q, k, v), exact, lens, case, bufs = _setup(
        seqlens, H_q, H_kv, T_q, T_max, D, causal, num_splits, block_n, dtype, seed, device, kv_layout)
    def reference(align="bottom-right"):
        return reference_decode.decode_partials_reference(*exact, lens.cpu(), causal=causal, align=align,
                                                          num_splits=cfg.num_splits,
                                                          keys_per_split=cfg.keys_per_split)
    o_ref, lse_ref = reference()
    B, S = len(seqlens), cfg.num_splits
    spare = cfg.block_m * S
    o_part, o_buf = guarded((B, H_q, T_q, S, D), spare * D, torch.float32, device)
    lse_part, lse_buf = guarded((B, H_q, T_q, S), spare, torch.float32, device)
    buffers = dict(zip(("Q", "K", "V"), bufs), SEQLENS=lens, O_PART=o_buf, LSE_PART=lse_buf)
    hint = "rows past the group's g·T_q rows must be masked out of the stores"
    tol = tolerance(dtype, device)
    top_left = top_left_hint(reference, (o_part, lse_part), max(tol, 1e-5)) if causal else (lambda: "")
    visible = reference_decode.decode_visible(T_q, T_max, lens.cpu(), causal)
    valid = reference_decode.keys_in_cache(T_max, lens.cpu())

    def unscaled(got, which):  # l or acc not rescaled when a key tile raises the running max
        return lambda: rescale_hint(got, which, *exact, visible, valid, num_splits=cfg.num_splits,
                                    keys_per_split=cfg.keys_per_split, block_n=cfg.block_n, tol=max(tol, 1e-5))

    def reads(ledger, where: str) -> None:
        check_decode_reads(ledger, seqlens=seqlens, H_kv=H_kv, T_max=T_max, D=D, group=H_q // H_kv,
                           keys_per_split=cfg.keys_per_split, where=where, strides=k.stride()[:3])
        check_races(ledger, where=where, dims=3)

    def compare() -> None:
        diagnosed(lambda: assert_close_or_empty(lse_part, lse_ref, case=case, tol=max(tol, 1e-5),
                                                name="lse_part (natural-log LSE of each row over each split's keys)"),
                  top_left, unscaled(lse_part, "lse"))
        diagnosed(lambda: assert_close_or_empty(o_part, o_ref, name="o_part (each split's softmax-weighted mean of V)",
                                                case=case, tol=tol), top_left, unscaled(o_part, "o"))

    check_kernel(KernelCheck(
        what="_decode_partial_kernel", case=case, launch=launch_decode.run_decode_partial,
        args=(kernel, q, k, v, lens, o_part, lse_part),
        kwargs=dict(causal=causal, cfg=cfg, num_warps=num_warps, num_stages=num_stages), key=kernel,
        device=device, accounted=accounted, buffers=buffers,
        tails=(Tail(o_buf, o_part.numel(), _past_the_end("_decode_partial_kernel", case, hint)),
               Tail(lse_buf, lse_part.numel(), _past_the_end("_decode_partial_kernel", case, hint))),
        inputs={"Q": q, "K": k, "V": v}, internals=((kernel, "_decode_partial_kernel", "08"),), reads=reads,
        compare=compare,
        # after the numbers: see verify.check_flash_kernel
        work=lambda ledger, where: check_work(ledger, decode_partial_model(
            seqlens=seqlens, H_q=H_q, H_kv=H_kv, T_q=T_q, T_max=T_max, D=D, causal=causal, block_m=cfg.block_m,
            block_n=cfg.block_n, num_splits=cfg.num_splits, keys_per_split=cfg.keys_per_split,
            row_blocks=cfg.row_blocks, strides=k.stride()[:3], kv_len=bufs[1].numel(), q_len=bufs[0].numel()),
            where=where)))


def check_decode_merge_kernel(kernel, *, num_splits: int, B: int = 1, H: int = 2, T_q: int = 1, D: int = 16,
                              empty: float = 0.3, spread: float = 3.0, offset: float = 0.0,
                              out_dtype=torch.float32, seed: int = 0, device: str | None = None):
    """Check a ``_decode_merge_kernel`` alone on random partials (B, H, T_q, num_splits[, D]).

    The partial LSEs are ``offset + spread · N(0, 1)``; a fraction ``empty`` of the splits is empty
    (LSE = -inf, O = 0), and the last query row has only empty splits (its O must be 0, its LSE -inf).
    A large ``offset`` (e.g. 100) overflows ``exp(LSE_s)`` in float32 unless the max is subtracted.

    Raises:
        AssertionError: naming the case, ``o`` or ``lse``, and the first wrong index.

    Contract: ``attnlab.contracts.decode_merge_kernel``.
    """
    import triton

    device, accounted = kernel_device(device, dtype=out_dtype, elements=B * H * T_q * num_splits * D)
    case = Case(B=B, H=H, T_q=T_q, num_splits=num_splits, D=D, empty_fraction=empty, spread=spread,
                offset=offset, o_dtype=_dtype_name(out_dtype))
    lse_part = randn(B, H, T_q, num_splits, seed=seed) * spread + offset
    o_part = randn(B, H, T_q, num_splits, D, seed=seed + 1)
    drop = torch.rand(B, H, T_q, num_splits, generator=generator(seed + 2), dtype=torch.float64) < empty
    drop.view(-1, num_splits)[-1] = True
    lse_part = lse_part.masked_fill(drop, float("-inf"))
    o_part = o_part.masked_fill(drop[..., None], 0.0)
    o_part32, lse_part32 = (t.to(torch.float32) for t in (o_part, lse_part))  # what the kernel sees
    o_ref, lse_ref = reference_decode.merge_partials_reference(o_part32.double(), lse_part32.double())
    o_in = tail_room(o_part32.to(device), num_splits * D)
    lse_in = tail_room(lse_part32.to(device), num_splits)
    o, o_buf = guarded((B, H, T_q, D), D, out_dtype, device)
    lse, lse_buf = guarded((B, H, T_q), 1, torch.float32, device)
    tol = 1e-5 if out_dtype == torch.float32 else tolerance(out_dtype)  # no dot product: no tf32

    def compare() -> None:
        diagnosed(lambda: assert_close_or_empty(o, o_ref, name="o (merged)", case=case, tol=tol,
                                                no_keys=SPLITS_MISSED),
                  lambda: merge_overflow_hint(o, lse_part32),
                  lambda: merge_weights_hint(o, o_part32, lse_part32, tol))
        assert_close_or_empty(lse, lse_ref, name="lse (merged, natural log)", case=case,
                              tol=1e-5, no_keys=SPLITS_MISSED)

    rows = B * H * T_q
    o_whole, lse_whole = (torch.as_strided(t, (t.numel() + extra,), (1,)) for t, extra in
                          ((o_in, num_splits * D), (lse_in, num_splits)))  # the partials and their NaN tail
    block_s = max(2, triton.next_power_of_2(num_splits))

    def work(ledger, where):
        check_work(ledger, decode_merge_model(rows=rows, num_splits=num_splits, D=D, block_s=block_s,
                                              o_len=o_whole.numel(), lse_len=lse_whole.numel()), where=where)

    check_kernel(KernelCheck(
        what="_decode_merge_kernel", case=case, launch=launch_decode.run_decode_merge,
        args=(kernel, o_in, lse_in, o, lse), key=kernel, device=device, accounted=accounted,
        buffers={"O_PART": o_whole, "LSE_PART": lse_whole, "O": o_buf, "LSE": lse_buf},
        tails=_merge_tails(o_buf, o, lse_buf, lse, case), inputs={"O_PART": o_in, "LSE_PART": lse_in},
        internals=((kernel, "_decode_merge_kernel", "08"),), compare=compare, work=work))


def _run_both(partial_kernel, merge_kernel, q, k, v, lens, o_part, lse_part, o, lse, *, causal, cfg,
              num_warps, num_stages):
    launch_decode.run_decode_partial(partial_kernel, q, k, v, lens, o_part, lse_part, causal=causal, cfg=cfg,
                              num_warps=num_warps, num_stages=num_stages)
    return launch_decode.run_decode_merge(merge_kernel, o_part, lse_part, o, lse)


def check_flash_decode(partial_kernel, merge_kernel, *, seqlens, H_q: int = 2, H_kv: int = 2, T_q: int = 1,
                       D: int = 16, T_max: int | None = None, causal: bool = True, num_splits: int | None = None,
                       block_n: int | None = None, dtype=torch.float32, seed: int = 0, num_warps: int = 4,
                       num_stages: int = launch_decode.NUM_STAGES, device: str | None = None):
    """Check both kernels together, launched as ``flash_decode`` launches them (with the split count of
    the case, see ``num_splits``), against :func:`attnlab.reference_decode.decode_attention_reference` in
    float64.

    Arguments as :func:`check_decode_partial_kernel`. Rows with no visible key (a length-0 sequence,
    or more new queries than keys with ``causal``) must give O = 0 and LSE = -inf.
    """
    device, T_max, cfg, (q, k, v), exact, lens, case, _ = _setup(
        seqlens, H_q, H_kv, T_q, T_max, D, causal, num_splits, block_n, dtype, seed, device)
    def reference(align="bottom-right"):
        return reference_decode.decode_attention_reference(*exact, lens.cpu(), causal=causal, align=align)
    o_ref, lse_ref = reference()
    B, S = len(seqlens), cfg.num_splits
    spare = cfg.block_m * S
    o_part, _ = guarded((B, H_q, T_q, S, D), spare * D, torch.float32, device)
    lse_part, _ = guarded((B, H_q, T_q, S), spare, torch.float32, device)
    o, o_buf = guarded((B, H_q, T_q, D), D, dtype, device)
    lse, lse_buf = guarded((B, H_q, T_q), 1, torch.float32, device)
    tol = tolerance(dtype, device)
    top_left = top_left_hint(reference, (o,), max(tol, 1e-5)) if causal else (lambda: "")

    def past_length():  # the same launch on a cache holding 0, not NaN, past each length
        kv = []
        for t in (k, v):
            t0, buf = with_tail(t.nan_to_num(0.0), cfg.keys_per_split * D)
            buf[t.numel():] = 0.0
            kv.append(t0)
        outs = [guarded(shape, spare * n, torch.float32, device)[0]
                for shape, n in (((B, H_q, T_q, S, D), D), ((B, H_q, T_q, S), 1))]
        outs += [guarded((B, H_q, T_q, D), D, dtype, device)[0], guarded((B, H_q, T_q), 1, torch.float32, device)[0]]
        return call_learner(_run_both, "flash_decode (your two kernels)", partial_kernel, merge_kernel, q, *kv, lens, *outs,
                     causal=causal, cfg=cfg, num_warps=num_warps, num_stages=num_stages, _key=partial_kernel)[0]

    def compare() -> None:
        diagnosed(lambda: assert_close_or_empty(o, o_ref, name="o", case=case, tol=tol), top_left,
                  lambda: past_length_hint(o, past_length))
        assert_close_or_empty(lse, lse_ref, name="lse (natural log)",
                              case=case, tol=max(tol, 1e-5))

    check_kernel(KernelCheck(
        what="flash_decode", call_name="flash_decode (your two kernels)", case=case, launch=_run_both,
        args=(partial_kernel, merge_kernel, q, k, v, lens, o_part, lse_part, o, lse),
        kwargs=dict(causal=causal, cfg=cfg, num_warps=num_warps, num_stages=num_stages), key=partial_kernel,
        device=device, tails=_merge_tails(o_buf, o, lse_buf, lse, case),
        inputs={"Q": q, "K_CACHE": k, "V_CACHE": v}, compare=compare))


def check_decode_partial_large_offsets(kernel, *, seqlens=(30, 17, 25), H_q: int = 4, H_kv: int = 2, T_q: int = 1,
                                       D: int = 16, causal: bool = True, num_splits: int = 2, seed: int = 0):
    """Check a ``_decode_partial_kernel`` on a cache whose element offsets pass 2³¹.

    The caches are (B, H_kv, T_max, D) views with a batch stride just under 2³¹ elements, so
    ``b * stride_kb`` (b >= 2) and ``b * stride_kb + kvh * stride_kh`` (b = 1) pass 2³¹: computed in
    32 bits they wrap around. Only the pages that hold data exist (:mod:`attnlab.checking.sparse`); the kernel
    runs on the CPU through Triton's interpreter on every machine, under the load accounting, which
    switches off every lane outside them, so a wrapped offset gives wrong numbers instead of a crash.
    B = len(seqlens) must be at least 3. Where the memory cannot be placed (not Linux) it prints why
    and checks nothing.

    Raises:
        AssertionError: naming the case and the first wrong partial; when the sequences below 2³¹
            are right and one past it is wrong, saying to widen the offset to 64 bits.
    """
    from .checking import sparse
    from .checking.hints import int32_offset_hint

    B, T_max = len(seqlens), max(seqlens) + 3
    if B < 3:
        raise ValueError(f"check_decode_partial_large_offsets: needs at least 3 sequences, got {B}")
    device = "cpu"  # the interpreter on every machine: the sparse cache exists only in CPU memory
    q0 = torch.empty(B, H_q, T_q, D)
    cfg = launch_decode.decode_config(q0, torch.empty(B, H_kv, T_max, D, device="meta"), num_splits, None)
    per_seq = H_kv * T_max * D  # one sequence's K (then its V) in its own piece
    # just under 2^31: b = 1 passes 2^31 from the second half of its K/V on, b = 2 at once
    stride_kb = 2**31 - (per_seq // 2) // 16 * 16
    piece = 2 * per_seq + cfg.keys_per_split * D
    try:
        mem = sparse.spread([b * stride_kb for b in range(B)], piece)
    except OSError as exc:
        print(f"(the large-offset case of _decode_partial_kernel is skipped here: {exc})")
        return
    strides = (stride_kb, T_max * D, D, 1)
    k = mem.whole.as_strided((B, H_kv, T_max, D), strides)
    v = mem.whole.as_strided((B, H_kv, T_max, D), strides, per_seq)
    (q, k_small, v_small), _, lens, _ = _cache_inputs(seqlens, H_q=H_q, H_kv=H_kv, T_q=T_q, T_max=T_max, D=D,
                                                      seed=seed, dtype=torch.float32, device=device, spare=0)
    for p in mem.pieces:
        p.fill_(float("nan"))
    for b in range(B):  # only the pieces are written
        k[b], v[b] = k_small[b], v_small[b]
    exact = tuple(t.to(torch.float64) for t in (q, k_small, v_small))
    o_ref, lse_ref = reference_decode.decode_partials_reference(
        *exact, lens, causal=causal, num_splits=cfg.num_splits, keys_per_split=cfg.keys_per_split)
    case = Case(_case(seqlens, H_q, H_kv, T_q, T_max, D, causal, cfg, torch.float32, True),
                stride_kb=stride_kb, largest_offset=(B - 1) * stride_kb + per_seq)
    S = cfg.num_splits
    spare = cfg.block_m * S
    o_part, o_buf = guarded((B, H_q, T_q, S, D), spare * D, torch.float32, device)
    lse_part, lse_buf = guarded((B, H_q, T_q, S), spare, torch.float32, device)
    buffers = {f"K/V of sequence {b}": p for b, p in enumerate(mem.pieces)}
    buffers.update(Q=q, SEQLENS=lens, O_PART=o_buf, LSE_PART=lse_buf)
    hint = "rows past the group's g·T_q rows must be masked out of the stores"
    far = [b * stride_kb + per_seq >= 2**31 for b in range(B)]

    def wraps(got, want):
        return lambda: int32_offset_hint(got, want, 1e-5, far=far, what="b * stride_kb + kvh * stride_kh",
                                         fix="b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh")

    def compare() -> None:
        diagnosed(lambda: assert_close_or_empty(lse_part, lse_ref, case=case, tol=1e-5,
                                                name="lse_part (natural-log LSE of each row over each split's keys)"),
                  wraps(lse_part, lse_ref))
        diagnosed(lambda: assert_close_or_empty(o_part, o_ref, name="o_part (each split's softmax-weighted mean of V)",
                                                case=case, tol=1e-5), wraps(o_part, o_ref))

    # accounted on every machine: the ledger switches off every lane outside the pages that exist
    check_kernel(KernelCheck(
        what="_decode_partial_kernel", case=case, launch=launch_decode.run_decode_partial,
        args=(kernel, q, k, v, lens, o_part, lse_part), kwargs=dict(causal=causal, cfg=cfg), key=kernel,
        accounted=True, buffers=buffers,
        tails=(Tail(o_buf, o_part.numel(), _past_the_end("_decode_partial_kernel", case, hint)),
               Tail(lse_buf, lse_part.numel(), _past_the_end("_decode_partial_kernel", case, hint))),
        compare=compare))
