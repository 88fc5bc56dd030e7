"""Typical mistakes in notebook 08 (format: samples/README.md).

Entries whose ``fails`` is empty are not mistakes: they are correct kernels written differently
from the reference (``tl.exp`` instead of ``tl.exp2``; a merge that walks the splits one at a time
with the online-softmax update), which must keep every point.
"""

import textwrap
from pathlib import Path

from attnlab.grading.samples import Mistake

_NB = "08_flash_decoding"
_PARTIAL, _MERGE = "_decode_partial_kernel", "_decode_merge_kernel"
_SPLITS = "test_decode_partial_splits"
_CACHE = "test_decode_partial_cache"
_MERGE_T = "test_decode_merge"
_GQA = "test_flash_decode_ragged_gqa"
_CHUNK = "test_flash_decode_causal_chunk"
_PARTIAL_ALL = (_SPLITS, _CACHE, _GQA, _CHUNK)

_EMPTY_O = "o = acc / tl.where(has_keys, l_i, 1.0)[:, None]"
_EMPTY_LSE = ("lse = tl.where(has_keys, (m_i + tl.log2(tl.where(has_keys, l_i, 1.0))) * 0.6931471805599453,\n"
              "                   float(\"-inf\"))")

# The merge as a loop over the splits, each folded in with notebook 01's online update: correct, and
# a fair alternative to the vectorised reference (slower on a GPU for many splits).
_MERGE_BODY_START = "    m = tl.max(lse_s, axis=0)\n"
_MERGE_REF = _MERGE_BODY_START + '''    m_use = tl.where(m == float("-inf"), 0.0, m)  # guard: every split empty
    w = tl.exp(lse_s - m_use)                      # each split's share, up to the common factor e^m
    l = tl.sum(w, axis=0)
    o = tl.sum(w[:, None] * o_s, axis=0) / tl.where(l > 0.0, l, 1.0)
    lse = tl.where(l > 0.0, m_use + tl.log(tl.where(l > 0.0, l, 1.0)), float("-inf"))
'''
_MERGE_LOOP = '''    m = float("-inf")
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for s in range(0, num_splits):
        lse_one = tl.load(LSE_PART + row * num_splits + s)
        o_one = tl.load(O_PART + (row * num_splits + s) * HEAD_DIM + offs_d)
        m_new = tl.maximum(m, lse_one)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        scale_old = tl.exp(m - m_safe)
        w_one = tl.exp(lse_one - m_safe)
        l = l * scale_old + w_one
        acc = acc * scale_old + w_one * o_one
        m = m_new
    o = acc / tl.where(l > 0.0, l, 1.0)
    lse = tl.where(l > 0.0, m + tl.log(tl.where(l > 0.0, l, 1.0)), float("-inf"))
'''

# The loop over the keys once per query head of the group, each pass updating that head's rows only:
# the right numbers, but every K/V tile loaded g times (what a kernel written per query head does).
_REF_SRC = (Path(__file__).resolve().parents[2] / "notebooks" / f"{_NB}.py").read_text()
_KEY_LOOP = _REF_SRC[_REF_SRC.index("    for start_n in range(start, end, BLOCK_N):\n"):
                     _REF_SRC.index("\n    has_keys = l_i > 0.0")]
_PER_HEAD_LOOP = ("    for hh in range(0, group):  # one pass over the slice per query head\n"
                  + textwrap.indent(_KEY_LOOP, "    ").replace(
                      "visible = key_ok[None, :]\n",
                      "visible = key_ok[None, :] & (offs_r // T_q == hh)[:, None]\n"))

# Shortcuts through atomics (issue 30): tl.atomic_add(ptr, 0) returns what memory holds, so it reads.
_K_LOAD = "k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)"
_V_LOAD = "v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)"
_ZEROS = "tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)"
_PER_HEAD_ATOMIC = (_PER_HEAD_LOOP
                    .replace(_K_LOAD, f"k = tl.atomic_add(K + kv_offs, {_ZEROS}, mask=key_ok[:, None])")
                    .replace(_V_LOAD, f"v = tl.atomic_add(V + kv_offs, {_ZEROS}, mask=key_ok[:, None])"))
# K read up to the slice's end whatever the sequence's length (NaN there; the scores past it are masked)
_K_PAST_LENGTH = (f"k = tl.atomic_add(K + kv_offs, {_ZEROS}, "
                  "mask=(offs_n < start + keys_per_split)[:, None])  # the whole slice, past seqlen too")
# every key of the slice in one tile of 64 (right while a slice holds at most 64 keys)
_ONE_TILE = (("    for start_n in range(start, end, BLOCK_N):\n        offs_n = start_n + offs_j\n",
              "    for start_n in range(start, end, 64):  # the whole slice as one tile\n"
              "        offs_n = start_n + tl.arange(0, 64)\n"),)

MISTAKES = [
    Mistake(
        id="08-merge-equal-weights", notebook=_NB, cell=_MERGE,
        edits=(("w = tl.exp(lse_s - m_use)", "w = tl.where(lse_s == float(\"-inf\"), 0.0, 1.0)"),),
        fails=(_MERGE_T, _GQA, _CHUNK),
        why="merges partials without rescaling: a plain average of the non-empty splits' outputs",
    ),
    Mistake(
        id="08-merge-no-max", notebook=_NB, cell=_MERGE,
        edits=(("w = tl.exp(lse_s - m_use)", "w = tl.exp(lse_s)"),
               ("m_use + tl.log(tl.where(l > 0.0, l, 1.0))", "tl.log(tl.where(l > 0.0, l, 1.0))")),
        fails=(_MERGE_T,),
        why="weights partials by exp(LSE_s) without subtracting the max: overflows once LSEs pass ~88",
    ),
    Mistake(
        id="08-merge-all-empty-nan", notebook=_NB, cell=_MERGE,
        edits=(('m_use = tl.where(m == float("-inf"), 0.0, m)', "m_use = m"),),
        fails=(_MERGE_T, _GQA, _CHUNK),
        why="no guard in the merge: a row whose splits are all empty computes exp(-inf - (-inf)) = NaN",
    ),
    Mistake(
        id="08-ignores-seqlen", notebook=_NB, cell=_PARTIAL,
        edits=(("end = tl.minimum(start + keys_per_split, seqlen)", "end = start + keys_per_split"),),
        fails=_PARTIAL_ALL,
        why="ignores the sequence's length: loads keys and values past cache_seqlens[b] (NaN there)",
    ),
    Mistake(
        id="08-unmasked-v-load", notebook=_NB, cell=_PARTIAL,
        edits=(("v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)", "v = tl.load(V + kv_offs)"),),
        fails=_PARTIAL_ALL,
        why="masks the scores past the length but loads V there anyway: 0 * NaN is NaN",
    ),
    Mistake(
        id="08-unmasked-k-load", notebook=_NB, cell=_PARTIAL,
        edits=(("k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)", "k = tl.load(K + kv_offs)"),),
        fails=(_SPLITS, _CACHE),
        why="loads K past cache_seqlens[b] and masks only the scores: right numbers here, but it reads "
            "memory the cache may not own; only the load accounting catches it",
    ),
    Mistake(
        id="08-kv-base-contiguous", notebook=_NB, cell=_PARTIAL,
        edits=(("kv_base = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh",
                "kv_base = (b * H_kv + kvh).to(tl.int64) * stride_kh"),),
        fails=(_CACHE,),
        why="finds the (sequence, KV head) at (b·H_kv + kvh)·stride_kh: right only for a contiguous cache",
    ),
    Mistake(
        id="08-kv-row-stride-head-dim", notebook=_NB, cell=_PARTIAL,
        edits=(("kv_offs = offs_n[:, None] * stride_kt + offs_d[None, :]",
                "kv_offs = offs_n[:, None] * HEAD_DIM + offs_d[None, :]"),),
        fails=(_CACHE,),
        why="steps keys by HEAD_DIM instead of stride_kt: right only while positions are contiguous",
    ),
    Mistake(
        id="08-wrong-kv-head", notebook=_NB, cell=_PARTIAL,
        edits=(("head = kvh * group + offs_r // T_q", "head = kvh + (offs_r // T_q) * H_kv"),),
        fails=(_CACHE, _GQA, _CHUNK),
        why="maps query head h to KV head h % H_kv instead of h // group",
    ),
    Mistake(
        id="08-top-left-causal", notebook=_NB, cell=_PARTIAL,
        edits=(("last = seqlen - T_q + qi", "last = qi"),),
        fails=_PARTIAL_ALL,
        why="aligns the causal mask top-left (j <= i) as in notebook 02, not bottom-right",
    ),
    Mistake(
        id="08-chunk-sees-whole-cache", notebook=_NB, cell=_PARTIAL,
        edits=(("last = seqlen - T_q + qi", "last = seqlen - 1 + 0 * qi"),),
        fails=(_CACHE, _CHUNK),
        why="lets every new query of a chunk see the whole cache: right for T_q = 1 only",
    ),
    Mistake(
        id="08-empty-split-nan", notebook=_NB, cell=_PARTIAL,
        edits=((_EMPTY_O, "o = acc / l_i[:, None]"),
               (_EMPTY_LSE, "lse = (m_i + tl.log2(l_i)) * 0.6931471805599453")),
        fails=_PARTIAL_ALL,
        why="divides by l = 0 for a split with no key: its partial O is 0/0 = NaN and poisons the merge",
    ),
    Mistake(
        id="08-no-guard-masked-tile", notebook=_NB, cell=_PARTIAL,
        edits=(('m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # guard: nothing visible to this row yet',
                "m_use = m_new"),),
        fails=(_CACHE, _CHUNK),
        why="no m = -inf guard: a chunk row whose first tile is fully masked computes exp(-inf - (-inf))",
    ),
    Mistake(
        id="08-lse-base-2", notebook=_NB, cell=_PARTIAL,
        edits=(("* 0.6931471805599453,\n", ",\n"),),
        fails=_PARTIAL_ALL,
        why="stores the partial LSE in base 2 (forgets the factor ln 2 after working with exp2)",
    ),
    Mistake(
        id="08-per-head-kv-reload", notebook=_NB, cell=_PARTIAL,
        edits=((_KEY_LOOP, _PER_HEAD_LOOP),),
        fails=(_CACHE,),
        why="loads each K/V tile once per query head of the GQA group instead of once for the group "
            "(right numbers, g times the cache traffic): only the load accounting catches it",
    ),
    Mistake(
        id="08-whole-slice-one-tile", notebook=_NB, cell=_PARTIAL,
        edits=_ONE_TILE,
        fails=(_SPLITS, _CACHE),
        why="reads each slice as one tile of 64 keys instead of tiles of BLOCK_N: right while a slice fits, "
            "then too large for the GPU's registers",
    ),
    Mistake(
        id="08-atomic-per-head-reload", notebook=_NB, cell=_PARTIAL,
        edits=((_KEY_LOOP, _PER_HEAD_ATOMIC),),
        fails=(_SPLITS, _CACHE),
        why="reads each K/V tile once per query head of the group, through tl.atomic_add(ptr, 0) instead of "
            "tl.load: an atomic reads memory too (and writes the cache, which fails every accounted case)",
    ),
    Mistake(
        id="08-atomic-past-seqlen", notebook=_NB, cell=_PARTIAL,
        edits=((_K_LOAD, _K_PAST_LENGTH),),
        fails=(_SPLITS, _CACHE),
        why="reads K past the sequence's length through tl.atomic_add(ptr, 0), masking only the scores",
    ),
    Mistake(
        id="08-ok-exp", notebook=_NB, cell=_PARTIAL,
        edits=(("qk_scale = scale * 1.4426950408889634", "qk_scale = scale"),
               ("alpha = tl.exp2(m_i - m_use)", "alpha = tl.exp(m_i - m_use)"),
               ("p = tl.exp2(s - m_use[:, None])", "p = tl.exp(s - m_use[:, None])"),
               ("(m_i + tl.log2(tl.where(has_keys, l_i, 1.0))) * 0.6931471805599453",
                "m_i + tl.log(tl.where(has_keys, l_i, 1.0))")),
        fails=(),
        why="not a mistake: tl.exp and natural-log statistics instead of exp2 are correct",
    ),
    Mistake(
        id="08-ok-merge-loop", notebook=_NB, cell=_MERGE,
        edits=((_MERGE_REF, _MERGE_LOOP),),
        fails=(),
        why="not a mistake: merging the splits one by one with the online update is correct",
    ),
    Mistake(
        id="08-kv-offset-32-bit", notebook=_NB, cell=_PARTIAL,
        edits=(("kv_base = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh",
                "kv_base = b * stride_kb + kvh * stride_kh"),),
        fails=(_CACHE,),
        why="computes the cache offset b * stride_kb + kvh * stride_kh in 32 bits: it wraps around on a "
            "cache past 2^31 elements (a fault on a GPU)",
    ),
]

TYPICAL = "08-merge-equal-weights"


# ------------------------------------------------------------------------------------------------
# More than its source (issue 30, item 2): the merge kernel loads the partials and stores nothing; a
# pre-run hook, which Triton runs with the launch's arguments, merges them in torch.
_MERGE_STORES = ("    tl.store(O + row * HEAD_DIM + offs_d, o.to(O.dtype.element_ty))\n"
                 "    tl.store(LSE + row, lse)\n")
_MERGE_HOOK = '''    pass  # no store: the hook below writes O and LSE


def _merge_hook(O_PART, LSE_PART, O, LSE, num_splits, **launch):
    lse_s = LSE_PART.reshape(-1, num_splits).double()
    o_s = O_PART.reshape(lse_s.shape[0], num_splits, -1).double()
    lse = torch.logsumexp(lse_s, dim=-1)
    w = torch.exp(lse_s - lse[:, None]).nan_to_num(0.0)
    O.view(lse.shape[0], -1).copy_((w[..., None] * o_s).sum(dim=1).to(O.dtype))
    LSE.view(-1).copy_(lse.to(LSE.dtype))


_decode_merge_kernel.add_pre_run_hook(_merge_hook)
'''

# The whole merge in program 0, one row after another; the other programs do nothing. Right numbers, no
# parallelism across rows and heads.
_MERGE_ROW = "    row = tl.program_id(0).to(tl.int64)\n"
_MERGE_CELL = _REF_SRC[_REF_SRC.index("def _decode_merge_kernel("):]
_MERGE_AFTER_ROW = _MERGE_CELL[_MERGE_CELL.index(_MERGE_ROW) + len(_MERGE_ROW):_MERGE_CELL.index(_MERGE_STORES)
                               + len(_MERGE_STORES)]
_MERGE_PROGRAM_0 = ("    if tl.program_id(0) == 0:  # program 0 merges every row; the others have nothing to do\n"
                    "        for row in range(0, tl.num_programs(0)):\n"
                    + "".join("        " + line + "\n" if line.strip() else "\n"
                              for line in _MERGE_AFTER_ROW.splitlines()))

MISTAKES += [
    Mistake(
        id="08-merge-program-0-all-rows", notebook=_NB, cell=_MERGE,
        edits=((_MERGE_ROW + _MERGE_AFTER_ROW, _MERGE_PROGRAM_0),),
        fails=(_MERGE_T,),
        why="merges every query row in program 0 (a loop over the rows) while the other programs do nothing",
    ),
    Mistake(
        id="08-merge-pre-run-hook-torch", notebook=_NB, cell=_MERGE,
        edits=((_MERGE_STORES, _MERGE_HOOK),),
        fails=(_MERGE_T, _GQA, _CHUNK),
        why="the merge kernel stores nothing; a pre-run hook on it merges the partials in torch",
    ),
]
