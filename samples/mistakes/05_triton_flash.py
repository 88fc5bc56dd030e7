"""Typical mistakes in notebook 05 (format: samples/README.md).

Entries whose ``fails`` is empty are not mistakes: they are correct kernels written differently
from the reference (a single masked loop, ``tl.exp`` instead of ``tl.exp2``), which must keep
every point.
"""

from pathlib import Path

from attnlab.grading.samples import Mistake

_NB, _CELL = "05_triton_flash", "_flash_fwd_kernel"
_REF = "test_flash_kernel_matches_reference"
_RAG = "test_flash_kernel_ragged"
_GROW = "test_flash_kernel_growing_scores"
_ALL = (_REF, _RAG, _GROW)

# the online-softmax update of each phase (the two differ only in m_new / m_use)
_UPDATE_1 = ("p = tl.exp2(s - m_new[:, None])\n        l_i = l_i * alpha + tl.sum(p, axis=1)\n"
             "        acc = acc * alpha[:, None]\n")
_UPDATE_2 = _UPDATE_1.replace("m_new[:, None]", "m_use[:, None]")

# A correct kernel in the plainest form: one loop over every key tile it needs, always masked, tl.exp,
# no guard. It replaces the reference's body from the Q load up to the stores.
_REF_SRC = (Path(__file__).resolve().parents[2] / "notebooks" / f"{_NB}.py").read_text()
_REF_BODY = _REF_SRC[_REF_SRC.index("    q = tl.load(Q + offs_m"):_REF_SRC.index("    tl.store(O + offs_m")]
_SINGLE_PHASE_BODY = '''    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        end = tl.minimum(start_m + BLOCK_M, T)
    else:
        end = T
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + offs_j
        kv_offs = offs_n[:, None] * stride_t + offs_d[None, :]
        k = tl.load(K + kv_offs, mask=offs_n[:, None] < T, other=0.0)
        v = tl.load(V + kv_offs, mask=offs_n[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        ok = offs_n[None, :] < T
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    lse = m_i + tl.log(l_i)
'''


# Every key in one block of 64: right while T <= 64 (all the CPU tests before T = 203 were).
_WHOLE_ROW_BODY = """    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    offs_n = tl.arange(0, 64)  # every key at once
    kv_offs = offs_n[:, None] * stride_t + offs_d[None, :]
    k = tl.load(K + kv_offs, mask=offs_n[:, None] < T, other=0.0)
    v = tl.load(V + kv_offs, mask=offs_n[:, None] < T, other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    ok = offs_n[None, :] < T
    if CAUSAL:
        ok = ok & (offs_n[None, :] <= offs_m[:, None])
    s = tl.where(ok, s, float("-inf"))
    m_i = tl.max(s, axis=1)
    p = tl.exp(s - m_i[:, None])
    l_i = tl.sum(p, axis=1)
    o = tl.dot(p.to(v.dtype), v) / l_i[:, None]
    lse = m_i + tl.log(l_i)
"""

# A first pass over the key tiles for the row max, a second for the sum and acc: no rescale, K read twice.
_TWO_PASS_BODY = """    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        end = tl.minimum(start_m + BLOCK_M, T)
    else:
        end = T
    for start_n in range(0, end, BLOCK_N):  # pass 1: the max
        offs_n = start_n + offs_j
        k = tl.load(K + offs_n[:, None] * stride_t + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        ok = offs_n[None, :] < T
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        m_i = tl.maximum(m_i, tl.max(tl.where(ok, s, float("-inf")), axis=1))
    for start_n in range(0, end, BLOCK_N):  # pass 2: the sum and acc against the final max
        offs_n = start_n + offs_j
        kv_offs = offs_n[:, None] * stride_t + offs_d[None, :]
        k = tl.load(K + kv_offs, mask=offs_n[:, None] < T, other=0.0)
        v = tl.load(V + kv_offs, mask=offs_n[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        ok = offs_n[None, :] < T
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        p = tl.exp(tl.where(ok, s, float("-inf")) - m_i[:, None])
        l_i += tl.sum(p, axis=1)
        acc += tl.dot(p.to(v.dtype), v)
    o = acc / l_i[:, None]
    lse = m_i + tl.log(l_i)
"""

# The same two passes over K, the first reading K through tl.atomic_add(ptr, 0) (an atomic reads too).
_ATOMIC_TWO_PASS_BODY = _TWO_PASS_BODY.replace(
    "        k = tl.load(K + offs_n[:, None] * stride_t + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)\n",
    "        k = tl.atomic_add(K + offs_n[:, None] * stride_t + offs_d[None, :],\n"
    "                          tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32), mask=offs_n[:, None] < T)\n", 1)

# One key per loop iteration, scores and the weighted sum element-wise (tl.sum), no tl.dot: one pass,
# each key once, the causal tiles skipped; the tensor cores never used.
_ONE_KEY_BODY = """    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        end = tl.minimum(start_m + BLOCK_M, T)
    else:
        end = T
    for j in range(0, end):  # one key at a time
        k = tl.load(K + j * stride_t + offs_d)
        v = tl.load(V + j * stride_t + offs_d)
        s = tl.sum(q * k[None, :], axis=1) * scale
        if CAUSAL:
            s = tl.where(j <= offs_m, s, float("-inf"))
        m_new = tl.maximum(m_i, s)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use)
        l_i = l_i * alpha + p
        acc = acc * alpha[:, None] + p[:, None] * v[None, :]
        m_i = m_new
    o = acc / l_i[:, None]
    lse = m_i + tl.log(l_i)
"""

# Tiles as the method asks, but S and PV element-wise (a 3-D broadcast summed with tl.sum), plus both
# products through tl.dot on the same tiles, for show: their results are never used, no stored value
# derives from them (every read rule is met; before the ledger traced data flow this kept every point).
_DUMMY_DOT_BODY = _SINGLE_PHASE_BODY.replace(
    "        s = tl.dot(q, tl.trans(k)) * scale\n",
    "        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale\n"
    "        junk_s = tl.dot(q, tl.trans(k))  # for the tensor-core rule, thrown away\n", 1).replace(
    "        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n",
    "        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)\n"
    "        junk_o = tl.dot(p.to(v.dtype), v)\n", 1)
assert _DUMMY_DOT_BODY.count("junk") == 2

# Red team 2: S through a tl.dot over zero-padded lanes (Q and K loaded as (rows, 2·HEAD_DIM) blocks whose
# second half is masked off: twice the FLOPs of S = QKᵀ, for the count) and PV element-wise. Every read rule
# is met, the results of the tl.dot feed O, and the FLOPs of tl.dot reached the share of *both* products the
# kernel needs (and stay under the cap): it kept every point while the tensor-core rule was per kernel.
_PADDED_DOT_BODY = _SINGLE_PHASE_BODY.replace(
    "    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)\n",
    "    offs_w = tl.arange(0, 2 * HEAD_DIM)  # HEAD_DIM lanes of data, HEAD_DIM of zeros\n"
    "    q = tl.load(Q + offs_m[:, None] * stride_t + offs_w[None, :],\n"
    "                mask=row_ok[:, None] & (offs_w[None, :] < HEAD_DIM), other=0.0)\n", 1).replace(
    "        s = tl.dot(q, tl.trans(k)) * scale\n",
    "        k_wide = tl.load(K + offs_n[:, None] * stride_t + offs_w[None, :],\n"
    "                         mask=(offs_n[:, None] < T) & (offs_w[None, :] < HEAD_DIM), other=0.0)\n"
    "        s = tl.dot(q, tl.trans(k_wide)) * scale  # S on 2 * HEAD_DIM lanes, half of them zeros\n", 1).replace(
    "        k = tl.load(K + kv_offs, mask=offs_n[:, None] < T, other=0.0)\n", "", 1).replace(
    "        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n",
    "        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)  # PV element-wise\n", 1)
assert _PADDED_DOT_BODY.count("k_wide") == 2 and "tl.dot(p" not in _PADDED_DOT_BODY

# Correct, in another order: key tiles from the last one down to the first, so a row can meet a
# fully masked tile before any visible key; the m = -inf guard keeps that exact. K is loaded
# already transposed, as a (HEAD_DIM, BLOCK_N) block.
_REVERSED_BODY = """    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        end = tl.minimum(start_m + BLOCK_M, T)
    else:
        end = T
    n_tiles = tl.cdiv(end, BLOCK_N)
    for i in range(0, n_tiles):
        start_n = (n_tiles - 1 - i) * BLOCK_N  # last tile first
        offs_n = start_n + offs_j
        kt = tl.load(K + offs_n[None, :] * stride_t + offs_d[:, None], mask=offs_n[None, :] < T, other=0.0)
        v = tl.load(V + offs_n[:, None] * stride_t + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)
        s = tl.dot(q, kt) * scale
        ok = offs_n[None, :] < T
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    lse = m_i + tl.log(l_i)
"""


MISTAKES = [
    Mistake(
        id="05-no-rescale", notebook=_NB, cell=_CELL,
        edits=((_UPDATE_1, _UPDATE_1.replace("        acc = acc * alpha[:, None]\n", "")),
               (_UPDATE_2, _UPDATE_2.replace("        acc = acc * alpha[:, None]\n", ""))),
        fails=_ALL,
        why="forgets to rescale acc when the running max grows",
    ),
    Mistake(
        id="05-lse-without-log-l", notebook=_NB, cell=_CELL,
        edits=(("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i * 0.6931471805599453"),),
        fails=_ALL,
        why="stores the running max as the LSE, forgetting + log(l)",
    ),
    Mistake(
        id="05-exp2-without-log2e", notebook=_NB, cell=_CELL,
        edits=(("qk_scale = scale * 1.4426950408889634", "qk_scale = scale"),),
        fails=_ALL,
        why="switches to exp2 without folding log2(e) into the score scale",
    ),
    Mistake(
        id="05-causal-skip-off-by-one", notebook=_NB, cell=_CELL,
        edits=(("hi = tl.minimum(start_m + BLOCK_M, T)", "hi = tl.minimum(start_m + BLOCK_M, T) - 1"),),
        fails=(_RAG,),
        why="stops the causal loop at the last row's index instead of one past it: skips a tile when T = 33",
    ),
    Mistake(
        id="05-no-diagonal-mask", notebook=_NB, cell=_CELL,
        edits=(('        s = tl.where(visible, s, float("-inf"))   # hidden keys get probability exactly 0\n', ""),),
        fails=_ALL,
        why="loads the diagonal and ragged tiles but never masks their scores",
    ),
    Mistake(
        id="05-masked-score-zero", notebook=_NB, cell=_CELL,
        edits=(('s = tl.where(visible, s, float("-inf"))', "s = tl.where(visible, s, 0.0)"),),
        fails=_ALL,
        why="gives hidden keys a score of 0 instead of -inf: they still take probability",
    ),
    Mistake(
        id="05-causal-mask-excludes-diagonal", notebook=_NB, cell=_CELL,
        edits=(("offs_n[None, :] <= offs_m[:, None]", "offs_n[None, :] < offs_m[:, None]"),),
        fails=_ALL,
        why="hides each query's own key (j < i instead of j <= i): row 0 sees nothing",
    ),
    Mistake(
        id="05-unmasked-store", notebook=_NB, cell=_CELL,
        edits=(("o.to(O.dtype.element_ty), mask=row_ok[:, None])", "o.to(O.dtype.element_ty))"),
               ("tl.store(LSE + offs_m, lse, mask=row_ok)", "tl.store(LSE + offs_m, lse)")),
        fails=_ALL,
        why="stores the padded rows beyond T: into the next head, or past the end of O and LSE",
    ),
    Mistake(
        id="05-unmasked-kv-load", notebook=_NB, cell=_CELL,
        edits=(("k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)", "k = tl.load(K + kv_offs)"),
               ("v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)", "v = tl.load(V + kv_offs)")),
        fails=_ALL,
        why="loads K and V past the last key without a mask, trusting the score mask alone",
    ),
    Mistake(
        id="05-max-init-zero", notebook=_NB, cell=_CELL,
        edits=(('m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
                "m_i = tl.zeros([BLOCK_M], dtype=tl.float32)"),),
        fails=(_GROW,),
        why="starts the running max at 0 instead of -inf: rows whose scores are all near -1000 give 0/0",
    ),
    # shortcuts: right numbers on small inputs, not the method
    Mistake(
        id="05-whole-kv-row", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _WHOLE_ROW_BODY),),
        fails=_ALL,
        why="loads every key and value as one block of 64 instead of tiles of BLOCK_N: right only while T <= 64",
    ),
    Mistake(
        id="05-two-pass", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _TWO_PASS_BODY),),
        fails=_ALL,
        why="a pass over K for the row max, then a second pass for the sum: no online rescale, K read twice",
    ),
    Mistake(
        id="05-causal-no-skip", notebook=_NB, cell=_CELL,
        edits=(("hi = tl.minimum(start_m + BLOCK_M, T)     # keys after the last row are never needed",
                "hi = T  # every tile, the hidden ones masked"),),
        fails=_ALL,
        why="loads the causal tiles above the diagonal and masks them instead of skipping them",
    ),
    Mistake(
        id="05-atomic-two-pass", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _ATOMIC_TWO_PASS_BODY),),
        fails=_ALL,
        why="two passes over K, the first through tl.atomic_add(ptr, 0) instead of tl.load: an atomic reads too",
    ),
    Mistake(
        id="05-one-key-no-dot", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _ONE_KEY_BODY),),
        fails=_ALL,
        why="one key per loop iteration with element-wise products (tl.sum) instead of tiles through tl.dot",
    ),
    Mistake(
        id="05-dummy-dot", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _DUMMY_DOT_BODY),),
        fails=_ALL,
        why="S and PV element-wise, with tl.dot on the same tiles whose results are thrown away",
    ),
    Mistake(
        id="05-padded-dot", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _PADDED_DOT_BODY),),
        fails=_ALL,
        why="S through a tl.dot over zero-padded lanes (twice its FLOPs) and PV element-wise: the FLOPs of one "
            "product stand in for the other's",
    ),
    # correct variants
    Mistake(
        id="05-ok-single-phase-exp", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _SINGLE_PHASE_BODY),),
        fails=(),
        why="not a mistake: one masked loop with tl.exp and no guard is correct, only slower on a GPU",
    ),
    Mistake(
        id="05-ok-reversed-tiles", notebook=_NB, cell=_CELL,
        edits=((_REF_BODY, _REVERSED_BODY),),
        fails=(),
        why="not a mistake: key tiles from the last to the first (with the -inf guard), K loaded transposed",
    ),
]

TYPICAL = "05-no-rescale"


# ------------------------------------------------------------------------------------------------
# Interpreter-only constructs (issue 16): each runs, and passes, under Triton's CPU interpreter but
# does not compile for a GPU, so the compile gate (attnlab.gpu_compile) costs it every kernel test.
_GATE = "does not compile for a GPU: the interpreter runs it, no GPU compiler does"

MISTAKES += [
    Mistake(
        id="05-gate-break", notebook=_NB, cell=_CELL,
        edits=(("    for start_n in range(lo, hi, BLOCK_N):\n",
                "    for start_n in range(lo, T, BLOCK_N):\n        if start_n >= hi:\n"
                "            break  # past the last key any row of this tile may see\n"),),
        fails=_ALL,
        why=f"leaves the masked loop with `break` instead of giving it the right bound: {_GATE}",
    ),
    Mistake(
        id="05-gate-int-of-tensor", notebook=_NB, cell=_CELL,
        edits=(("    for start_n in range(lo, hi, BLOCK_N):\n",
                "    for start_n in range(int(lo), int(hi), BLOCK_N):\n"),),
        fails=_ALL,
        why=f"turns run-time loop bounds into Python ints (data-dependent Python control flow): {_GATE}",
    ),
    Mistake(
        id="05-gate-plain-global", notebook=_NB, cell=_CELL,
        edits=(("@triton.jit\ndef _flash_fwd_kernel(",
                "LOG2E = 1.4426950408889634\n\n\n@triton.jit\ndef _flash_fwd_kernel("),
               ("qk_scale = scale * 1.4426950408889634", "qk_scale = scale * LOG2E")),
        fails=_ALL,
        why=f"reads a plain Python global (not a tl.constexpr) inside the kernel: {_GATE}",
    ),
    Mistake(
        id="05-keys-past-t-unmasked", notebook=_NB, cell=_CELL,
        edits=(("        visible = key_ok[None, :]\n", "        visible = offs_n[None, :] >= 0  # no key mask\n"),),
        fails=_ALL,
        why="masks the K/V loads past T but not the scores: the padded keys (loaded as 0) score 0 and take "
            "probability when the attention is not causal",
    ),
    Mistake(
        id="05-head-offset-padded", notebook=_NB, cell=_CELL,
        edits=(("    Q += bh * stride_bh                       # every pointer now starts at this (batch, head)\n"
                "    K += bh * stride_bh\n    V += bh * stride_bh\n    O += bh * stride_bh\n",
                "    head = bh * tl.cdiv(T, BLOCK_M) * BLOCK_M * HEAD_DIM  # a head's rows, padded to the tile\n"
                "    Q += head\n    K += head\n    V += head\n    O += head\n"),),
        fails=(_RAG,),
        why="takes each head's offset from T padded to a whole query tile instead of stride_bh = T * HEAD_DIM "
            "(the stores are masked, yet the last head's land past the end)",
    ),
    Mistake(
        id="05-bh-offset-32-bit", notebook=_NB, cell=_CELL,
        edits=(("bh = tl.program_id(1).to(tl.int64)", "bh = tl.program_id(1)"),),
        fails=(_REF,),
        why="keeps bh in 32 bits: bh * stride_bh wraps around once a tensor passes 2^31 elements (a fault on a GPU)",
    ),
]


# ------------------------------------------------------------------------------------------------
# More than its source (issue 30, item 2): the kernel does the reads and stores nothing; a pre-run hook,
# which Triton runs with the launch's arguments, computes attention in torch from the whole score matrix.
_STORES = ("    tl.store(O + offs_m[:, None] * stride_t + offs_d[None, :], o.to(O.dtype.element_ty), mask=row_ok[:, None])\n"
           "    tl.store(LSE + offs_m, lse, mask=row_ok)\n")
_ATTENTION_HOOK = '''    pass  # no store: the hook below writes O and LSE


def _attention_hook(Q, K, V, O, LSE, stride_bh, stride_t, T, scale, CAUSAL=False, **launch):
    s = Q.double() @ K.double().transpose(-1, -2) * scale  # the whole T x T score matrix
    if CAUSAL:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    LSE.copy_(torch.logsumexp(s, dim=-1))
    O.copy_((torch.softmax(s, dim=-1) @ V.double()).to(O.dtype))


_flash_fwd_kernel.add_pre_run_hook(_attention_hook)
'''

MISTAKES += [
    Mistake(
        id="05-pre-run-hook-torch", notebook=_NB, cell=_CELL,
        edits=((_STORES, _ATTENTION_HOOK),),
        fails=_ALL,
        why="stores nothing; a pre-run hook on the kernel object computes attention in torch from the whole "
            "score matrix",
    ),
]
