"""Typical mistakes in notebook 07 (format: samples/README.md).

Entries whose ``fails`` is empty are correct kernels written differently from the reference
(dQ by atomics inside the dK/dV kernel), which must keep every point.
"""

from pathlib import Path

from attnlab.grading.samples import Mistake, strip_markers

_NB = "07_triton_backward"
_PRE, _DKDV, _DQ = "_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"
_PREP = "test_bwd_preprocess"
_REF = "test_flash_backward_matches_reference"
_RAG = "test_flash_backward_ragged"
_E2E = "test_triton_attention_end_to_end"
_GRADS = (_REF, _RAG, _E2E)

# The reference dK/dV and dQ cells (markers removed, as in the reference submission), for the
# atomic variant, which changes every call of the helper.
_SRC = strip_markers((Path(__file__).resolve().parents[2] / "notebooks" / f"{_NB}.py").read_text())
_DKDV_SRC = _SRC[_SRC.index("@triton.jit\ndef _dkdv_tile("):_SRC.index("# %% [markdown]\n# ### 4c.")].rstrip() + "\n"
_DQ_BODY = _SRC[_SRC.index("    bh = tl.program_id(1).to(tl.int64)\n    start_m"):
                _SRC.index("# %% nbgrader={\"grade_id\": \"triton_flash_attention_backward\"")].rstrip() + "\n"

# dQ by atomics: each (query tile, key tile) pair met by the dK/dV kernel adds dS K into DQ_ACC;
# the dQ kernel only scales DQ_ACC into DQ.
_ATOMIC_ADD = "tl.atomic_add(DQ_ACC + q_offs, dq_part, mask=row_ok[:, None])"
_DKDV_ATOMIC = (_DKDV_SRC
                .replace("def _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m,",
                         "def _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, DQ_ACC, start_m,")
                .replace("_dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m,",
                         "_dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, DQ_ACC, start_m,")
                .replace("    dk = tl.dot(ds_t.to(q.dtype), q, dk)",
                         "    dq_part = tl.dot(tl.trans(ds_t).to(k.dtype), k)  # dS K for these query rows\n"
                         f"    {_ATOMIC_ADD}\n"
                         "    dk = tl.dot(ds_t.to(q.dtype), q, dk)")
                .replace("    DELTA += bh * T\n", "    DELTA += bh * T\n    DQ_ACC += bh * stride_bh\n"))
_DQ_COPY = '''    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs = bh * stride_bh + offs_m[:, None] * stride_t + offs_d[None, :]
    row_ok = offs_m[:, None] < T
    dq = tl.load(DQ_ACC + offs, mask=row_ok, other=0.0) * scale
    tl.store(DQ + offs, dq.to(DQ.dtype.element_ty), mask=row_ok)
'''
_ATOMIC_CELLS = ((_DQ, ((_DQ_BODY, _DQ_COPY),)),)

# Shortcuts with the right numbers and not the method (issue 30), which only the work ledger sees.
# dQ written as a load-add-store spelled with keywords: the same race as 07-dq-atomics-race.
_KEYWORD_RACE = ("tl.store(pointer=DQ_ACC + q_offs, value=tl.load(DQ_ACC + q_offs, mask=row_ok[:, None]) + dq_part, "
                 "mask=row_ok[:, None])")
# Causal, but every tile pair visited and masked: the dK/dV loop starts at query tile 0, the dQ loop
# runs to T. The masks keep the numbers right.
_DKDV_NO_SKIP = (("lo = (start_n // BLOCK_M) * BLOCK_M                  # the first query tile that sees any key here",
                  "lo = 0                                               # every query tile, masked"),)
_DQ_NO_SKIP = (("hi = tl.minimum(start_m + BLOCK_M, T)\n    else:", "hi = T  # every key tile, masked\n    else:"),)
# Program 0 of each head does every query tile; the other programs of the head do nothing.
_DQ_HEAD = _DQ_BODY[:_DQ_BODY.index("    q_offs = ")]
_DQ_TILE = _DQ_BODY[_DQ_BODY.index("    q_offs = "):]
_DQ_PROGRAM_0 = (_DQ_HEAD.replace("    start_m = tl.program_id(0) * BLOCK_M\n", "")
                 .replace("    offs_m = start_m + tl.arange(0, BLOCK_M)\n", "")
                 .replace("    row_ok = offs_m < T\n", "")
                 + "    if tl.program_id(0) == 0:  # program 0 walks every query tile of its head; the others idle\n"
                 + "        for start_m in range(0, T, BLOCK_M):\n"
                 + "            offs_m = start_m + tl.arange(0, BLOCK_M)\n"
                 + "            row_ok = offs_m < T\n"
                 + "".join("        " + line + "\n" if line.strip() else "\n" for line in _DQ_TILE.splitlines()))
# One key per loop iteration, products element-wise (tl.sum of q * k) instead of tl.dot.
_DQ_LOOPS = _DQ_BODY[_DQ_BODY.index("    # Key tiles [0, lo)"):_DQ_BODY.index("    dq = dq * scale")]
_DQ_ONE_KEY = """    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, T)
    else:
        hi = T
    for j in range(0, hi):  # one key at a time
        k = tl.load(K + j * stride_t + offs_d)
        v = tl.load(V + j * stride_t + offs_d)
        p = tl.exp2(tl.sum(q * k[None, :], axis=1) * qk_scale - lse2)
        if CAUSAL:
            p = tl.where(j <= offs_m, p, 0.0)
        ds = p * (tl.sum(do * v[None, :], axis=1) - delta)
        dq += ds[:, None] * k[None, :]
"""

# Red team 2: S computed twice through tl.dot (and averaged) and dK = dSᵀ Q element-wise: the FLOPs of the
# repeated product stand in for dK's; every read rule met, both S products feed the outputs. It kept every
# point while the tensor-core rule was per kernel.
_DKDV_REPEATED = (_DKDV_SRC
                  .replace("    s_t = tl.dot(k, tl.trans(q)) * qk_scale",
                           "    s_t = (tl.dot(k, tl.trans(q)) + tl.dot(k, tl.trans(q))) * (0.5 * qk_scale)  # S twice")
                  .replace("    dk = tl.dot(ds_t.to(q.dtype), q, dk)",
                           "    dk += tl.sum(ds_t[:, :, None] * q[None, :, :], axis=1)  # dK element-wise"))
assert _DKDV_REPEATED.count("tl.dot(k, tl.trans(q))") == 2 and "dK element-wise" in _DKDV_REPEATED

MISTAKES = [
    Mistake(
        id="07-delta-from-do-only", notebook=_NB, cell=_PRE,
        edits=(("tl.sum(o * do, axis=1)", "tl.sum(do * do, axis=1)"),),
        fails=(_PREP, *_GRADS),
        why="computes Δ = rowsum(dO ∘ dO): the wrong tensors",
    ),
    Mistake(
        id="07-delta-dropped", notebook=_NB, cell=_DQ,
        edits=(("ds = p * (dp - delta[:, None])", "ds = p * dp"),),
        fails=_GRADS,
        why="forms dS = P ∘ dP in the dQ kernel, dropping Δ",
    ),
    Mistake(
        id="07-p-from-tile-max", notebook=_NB, cell=_DQ,
        edits=(("p = tl.exp2(s - lse2[:, None])", "p = tl.exp2(s - tl.max(s, axis=1)[:, None])"),),
        fails=_GRADS,
        why="rebuilds P with the tile's running max, as in the forward, instead of the saved LSE",
    ),
    Mistake(
        id="07-dq-scale-missing", notebook=_NB, cell=_DQ,
        edits=(("dq = dq * scale", "dq = dq"),),
        fails=_GRADS,
        why="forgets the factor scale on dQ",
    ),
    Mistake(
        id="07-dk-scale-missing", notebook=_NB, cell=_DKDV,
        edits=(("dk = dk * scale", "dk = dk"),),
        fails=_GRADS,
        why="forgets the factor scale on dK",
    ),
    Mistake(
        id="07-no-causal-mask", notebook=_NB, cell=_DKDV,
        edits=(("keep = keep & (offs_m[None, :] >= offs_n[:, None])", "keep = keep"),),
        fails=_GRADS,
        why="visits only the tiles on and below the diagonal but forgets the element mask in the dK/dV kernel",
    ),
    Mistake(
        id="07-dq-diagonal-skipped", notebook=_NB, cell=_DQ,
        edits=(("hi = tl.minimum(start_m + BLOCK_M, T)", "hi = tl.minimum(start_m, T)"),),
        fails=_GRADS,
        why="stops the dQ kernel's causal loop before the diagonal tile",
    ),
    Mistake(
        id="07-dkdv-diagonal-skipped", notebook=_NB, cell=_DKDV,
        edits=(("lo = (start_n // BLOCK_M) * BLOCK_M", "lo = (start_n // BLOCK_M + 1) * BLOCK_M"),),
        fails=_GRADS,
        why="starts the dK/dV kernel's causal loop one query tile below the diagonal",
    ),
    Mistake(
        id="07-unmasked-dkdv-store", notebook=_NB, cell=_DKDV,
        edits=(("tl.store(DK + kv_offs, dk.to(DK.dtype.element_ty), mask=key_ok[:, None])",
                "tl.store(DK + kv_offs, dk.to(DK.dtype.element_ty))"),
               ("tl.store(DV + kv_offs, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])",
                "tl.store(DV + kv_offs, dv.to(DV.dtype.element_ty))")),
        fails=(_RAG,),
        why="stores the padded key rows beyond T: into the next head's rows, or past the end of dK and dV",
    ),
    Mistake(
        id="07-dq-atomics-race", notebook=_NB, cell=_DKDV,
        edits=((_DKDV_SRC, _DKDV_ATOMIC.replace(
            _ATOMIC_ADD, "tl.store(DQ_ACC + q_offs, tl.load(DQ_ACC + q_offs, mask=row_ok[:, None]) + dq_part, "
                         "mask=row_ok[:, None])")),),
        other_cells=_ATOMIC_CELLS,
        fails=(_REF, _RAG),
        why="adds into dQ rows that other programs share with a load and a store instead of tl.atomic_add "
            "(right under the interpreter, a race on a GPU; the end-to-end test cannot see it on a CPU)",
    ),
    Mistake(
        id="07-dq-keyword-race", notebook=_NB, cell=_DKDV,
        edits=((_DKDV_SRC, _DKDV_ATOMIC.replace(_ATOMIC_ADD, _KEYWORD_RACE)),),
        other_cells=_ATOMIC_CELLS,
        fails=(_REF, _RAG),
        why="the load-add-store race on DQ_ACC spelled with keyword arguments (tl.store(pointer=..., value=...)): "
            "the ledger sees two programs update the same element, however the call is written",
    ),
    Mistake(
        id="07-causal-no-skip", notebook=_NB, cell=_DKDV,
        edits=_DKDV_NO_SKIP,
        other_cells=((_DQ, _DQ_NO_SKIP),),
        fails=(_REF, _RAG),
        why="visits every (key tile, query tile) pair when causal and masks the hidden ones instead of skipping "
            "them: right numbers, twice the work",
    ),
    Mistake(
        id="07-program-0-does-all", notebook=_NB, cell=_DQ,
        edits=((_DQ_BODY, _DQ_PROGRAM_0),),
        fails=(_REF, _RAG),
        why="program 0 of each head computes dQ for every query tile while the other programs idle",
    ),
    Mistake(
        id="07-one-key-elementwise", notebook=_NB, cell=_DQ,
        edits=((_DQ_LOOPS, _DQ_ONE_KEY),),
        fails=(_REF, _RAG),
        why="the dQ program takes one key per loop iteration and multiplies element-wise (tl.sum) instead of "
            "tile products with tl.dot",
    ),
    Mistake(
        id="07-repeated-product", notebook=_NB, cell=_DKDV,
        edits=((_DKDV_SRC, _DKDV_REPEATED),),
        fails=(_REF, _RAG),
        why="S computed twice through tl.dot and dK element-wise: one product repeated stands in for another",
    ),
    Mistake(
        id="07-ok-dq-by-atomics", notebook=_NB, cell=_DKDV,
        edits=((_DKDV_SRC, _DKDV_ATOMIC),),
        other_cells=_ATOMIC_CELLS,
        fails=(),
        why="not a mistake: dQ added with tl.atomic_add inside the dK/dV kernel, scaled out by the dQ kernel",
    ),
    Mistake(
        id="07-head-offset-padded", notebook=_NB, cell=_DKDV,
        edits=(("    Q += bh * stride_bh\n    K += bh * stride_bh\n    V += bh * stride_bh\n"
                "    DO += bh * stride_bh\n    DK += bh * stride_bh\n    DV += bh * stride_bh\n",
                "    head = bh * tl.cdiv(T, BLOCK_N) * BLOCK_N * HEAD_DIM  # a head's rows, padded to the tile\n"
                "    Q += head\n    K += head\n    V += head\n    DO += head\n    DK += head\n    DV += head\n"),),
        fails=(_RAG, _E2E),
        why="takes each head's offset from T padded to a whole key tile instead of stride_bh = T * HEAD_DIM "
            "(the stores are masked, yet the last head's land past the end)",
    ),
    Mistake(
        id="07-bh-offset-32-bit", notebook=_NB, cell=_PRE,
        edits=(("bh = tl.program_id(1).to(tl.int64)", "bh = tl.program_id(1)"),),
        fails=(_PREP,),
        why="keeps bh in 32 bits in the preprocess kernel: bh * stride_bh wraps around past 2^31 elements",
    ),
    Mistake(
        id="07-dq-bh-offset-32-bit", notebook=_NB, cell=_DQ,
        edits=(("    bh = tl.program_id(1).to(tl.int64)\n    start_m", "    bh = tl.program_id(1)\n    start_m"),),
        fails=(_REF,),
        why="keeps bh in 32 bits in the dQ kernel: bh * stride_bh wraps around past 2^31 elements",
    ),
    Mistake(
        id="07-dkdv-offset-32-bit", notebook=_NB, cell=_DKDV,
        edits=(("    bh = tl.program_id(1).to(tl.int64)\n    start_n", "    bh = tl.program_id(1)\n    start_n"),),
        fails=(_REF,),
        why="keeps bh in 32 bits in the dK/dV kernel: bh * stride_bh wraps around past 2^31 elements",
    ),
]

TYPICAL = "07-dk-scale-missing"


# ------------------------------------------------------------------------------------------------
# More than its source (issue 30, item 2): the dK/dV kernel reads its tiles and stores nothing; a pre-run
# hook, which Triton runs with the launch's arguments, computes dK and dV in torch from the whole P.
_DKDV_STORES = ("    tl.store(DK + kv_offs, dk.to(DK.dtype.element_ty), mask=key_ok[:, None])\n"
                "    tl.store(DV + kv_offs, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])\n")
_DKDV_HOOK = '''    pass  # no store: the hook below writes DK and DV


def _dkdv_hook(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC, stride_bh, stride_t, T, scale, CAUSAL=False, **launch):
    q, k, v, do = (t.double() for t in (Q, K, V, DO))
    s = q @ k.transpose(-1, -2) * scale  # the whole T x T score matrix
    if CAUSAL:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    p = torch.exp(s - LSE.double()[..., None])
    ds = p * (do @ v.transpose(-1, -2) - DELTA.double()[..., None])
    DV.copy_((p.transpose(-1, -2) @ do).to(DV.dtype))
    DK.copy_((ds.transpose(-1, -2) @ q * scale).to(DK.dtype))


_bwd_dkdv_kernel.add_pre_run_hook(_dkdv_hook)
'''

MISTAKES += [
    Mistake(
        id="07-pre-run-hook-torch", notebook=_NB, cell=_DKDV,
        edits=((_DKDV_STORES, _DKDV_HOOK),),
        fails=_GRADS,
        why="the dK/dV kernel stores nothing; a pre-run hook on it computes dK and dV in torch from the whole P",
    ),
]
