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
        id="07-ok-dq-by-atomics", notebook=_NB, cell=_DKDV,
        edits=((_DKDV_SRC, _DKDV_ATOMIC),),
        other_cells=_ATOMIC_CELLS,
        fails=(),
        why="not a mistake: dQ added with tl.atomic_add inside the dK/dV kernel, scaled out by the dQ kernel",
    ),
]

TYPICAL = "07-dk-scale-missing"
