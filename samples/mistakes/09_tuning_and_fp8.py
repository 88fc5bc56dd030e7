"""Typical mistakes in notebook 09 (format: samples/README.md).

Entries whose ``fails`` is empty are not mistakes: they are correct helpers written differently from
the reference (a tiny floor instead of 1.0 for an all-zero head's scale; multiplying by the
reciprocal of the scale, which rounds a few values to the other E4M3 neighbour; a loop instead of
vectorised code; another but equal formula), which must keep every point.

The ``09-cheat-*`` entries are not mistakes either but ways of passing without the method (issue 30):
tables of the tested cases (the hidden tests draw theirs at grading time), the checkers' own
references called from the helper (refused and flagged for review), and conversions to E4M3 that
skip the saturation where the checks used to look only for ``.to`` on a float tensor.
"""

from attnlab.grading.samples import Mistake

_NB = "09_tuning_and_fp8"
_SCALES, _QUANT, _SMEM, _PRUNE = "fp8_scales", "quantize_fp8", "smem_estimate", "prune_configs"
_T_SCALES, _T_QUANT = "test_fp8_scales", "test_quantize_fp8"
_T_SMEM, _T_PRUNE = "test_smem_estimate", "test_prune_configs"

_HEAD_AMAX = "amax = x.abs().amax(dim=(-2, -1)).float()"
_SMEM_RETURN = "return (block_m + 2 * num_stages * block_n) * head_dim * elem_bytes"
_QUANT_RETURN = "return (x.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)"
_SCALES_BODY = "    B, H, T, D = x.shape\n    if block_rows is None:\n        amax = x.abs().amax(dim=(-2, -1)).float()"
_PRUNE_LOOP = "    kept = []\n    for c in configs:"

# what a learner who logged the checks' calls could paste: each tested (T, HEAD_DIM, bytes per element,
# CAUSAL, limit) with the indices of the configs kept, and every tested shared-memory case
_PRUNE_TABLE = {
    (4096, 128, 2, True, 232448): [*range(20), 21, 22, 26], (384, 64, 2, False, 232448): [*range(26)],
    (192, 64, 4, True, 100000): [0, 1, 2, 3], (8192, 128, 1, True, 150000): [*range(24), 26],
    (1024, 256, 2, False, 232448): [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 15, 25],
    (320, 64, 2, False, 232448): [0, 1, 2, 3, 4, 5, 25], (4096, 128, 2, True, 229376): [*range(20), 21, 22, 26],
}
_SMEM_TABLE = {(64, 64, 2, 64, 2): 40960, (128, 64, 3, 128, 2): 131072, (128, 128, 4, 128, 2): 294912,
               (64, 32, 3, 128, 1): 32768, (128, 32, 2, 64, 4): 65536}
_ZERO_GUARD = "torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))"

MISTAKES = [
    Mistake(
        id="09-scale-from-max", notebook=_NB, cell=_SCALES,
        edits=((_HEAD_AMAX, "amax = x.amax(dim=(-2, -1)).float()"),),
        fails=(_T_SCALES,),
        why="takes the scale from max(x) instead of max |x|: a head whose largest entries are negative overflows",
    ),
    Mistake(
        id="09-zero-head-scale", notebook=_NB, cell=_SCALES,
        edits=((_ZERO_GUARD, "amax / E4M3_MAX"),),
        fails=(_T_SCALES,),
        why="an all-zero head (or block) gets scale 0, so x / scale is 0/0 = NaN",
    ),
    Mistake(
        id="09-per-tensor-scale", notebook=_NB, cell=_SCALES,
        edits=((_HEAD_AMAX, "amax = x.abs().amax().float().expand(B, H)"),),
        fails=(_T_SCALES,),
        why="one scale for the whole tensor instead of one per head",
    ),
    Mistake(
        id="09-ragged-block-dropped", notebook=_NB, cell=_SCALES,
        edits=(("n_blocks = -(-T // block_rows)", "n_blocks = T // block_rows"),),
        fails=(_T_SCALES,),
        why="counts blocks with T // block_rows: the short last block gets no scale",
    ),
    Mistake(
        id="09-quantize-multiplies", notebook=_NB, cell=_QUANT,
        edits=(("(x.float() / s)", "(x.float() * s)"),),
        fails=(_T_QUANT,),
        why="multiplies by the dequantisation scale instead of dividing",
    ),
    Mistake(
        id="09-block-scale-tiled", notebook=_NB, cell=_QUANT,
        edits=(("scale.repeat_interleave(block_rows, dim=2)", "scale.repeat(1, 1, block_rows)"),),
        fails=(_T_QUANT,),
        why="spreads per-block scales with repeat (tiles the whole row of scales) instead of repeat_interleave",
    ),
    Mistake(
        id="09-smem-stages-on-q", notebook=_NB, cell=_SMEM,
        edits=(("return (block_m + 2 * num_stages * block_n) * head_dim * elem_bytes",
                "return num_stages * (block_m + 2 * block_n) * head_dim * elem_bytes"),),
        fails=(_T_SMEM, _T_PRUNE),
        why="multi-buffers the Q tile too: overestimates shared memory and prunes configs that fit",
    ),
    Mistake(
        id="09-prune-fp32-bytes", notebook=_NB, cell=_PRUNE,
        edits=(('elem_bytes = args["Q"].element_size()', "elem_bytes = 4"),),
        fails=(_T_PRUNE,),
        why="assumes 4 bytes per element: twice the shared memory of bf16, prunes configs that fit",
    ),
    Mistake(
        id="09-prune-named-args-only", notebook=_NB, cell=_PRUNE,
        edits=(("args = {**named_args, **kwargs}", "args = named_args"),),
        fails=(_T_PRUNE,),
        why="looks HEAD_DIM and CAUSAL up in named_args only; the launcher passes them as keywords",
    ),
    Mistake(
        id="09-prune-ignores-causal-band", notebook=_NB, cell=_PRUNE,
        edits=(("if T % bm or T % bn or (causal and bm % bn):", "if T % bm or T % bn:"),),
        fails=(_T_PRUNE,),
        why="keeps causal configs whose BLOCK_N does not divide BLOCK_M: the diagonal band is not whole steps",
    ),
    Mistake(
        id="09-prune-limit-exclusive", notebook=_NB, cell=_PRUNE,
        edits=(("if smem_estimate(bm, bn, c.num_stages, head_dim, elem_bytes) > limit:",
                "if smem_estimate(bm, bn, c.num_stages, head_dim, elem_bytes) >= limit:"),),
        fails=(_T_PRUNE,),
        why="drops a config that needs exactly the shared-memory limit (the limit is inclusive)",
    ),
    Mistake(
        id="09-prune-block-n-not-checked", notebook=_NB, cell=_PRUNE,
        edits=(("if T % bm or T % bn or (causal and bm % bn):", "if T % bm or (causal and bm % bn):"),),
        fails=(_T_PRUNE,),
        why="checks that BLOCK_M divides T but not BLOCK_N: a non-causal 64x128 config at T = 320 leaves a ragged key tile",
    ),
    Mistake(
        id="09-quantize-no-clamp", notebook=_NB, cell=_QUANT,
        edits=(("(x.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(", "(x.float() / s).to("),),
        fails=(_T_QUANT,),
        why="casts without saturating: PyTorch's cast saturates by chance, others (ml_dtypes) give NaN",
    ),
    Mistake(
        id="09-ok-scale-floor", notebook=_NB, cell=_SCALES,
        edits=((_ZERO_GUARD, "amax.clamp_min(1e-12) / E4M3_MAX"),),
        fails=(),
        why="not a mistake: a tiny positive floor for an all-zero group's scale is as good as 1.0",
    ),
    Mistake(
        id="09-ok-reciprocal", notebook=_NB, cell=_QUANT,
        edits=(("(x.float() / s)", "(x.float() * (1.0 / s))"),),
        fails=(),
        why="not a mistake: multiplying by the reciprocal rounds a few values to the other E4M3 neighbour",
    ),
    Mistake(
        id="09-cheat-smem-table", notebook=_NB, cell=_SMEM,
        edits=((_SMEM_RETURN, f"return {_SMEM_TABLE!r}.get((block_m, block_n, num_stages, head_dim, elem_bytes), "
                              "num_stages * (block_m + 2 * block_n) * head_dim * elem_bytes)"),),
        fails=(_T_SMEM, _T_PRUNE),
        why="a table of the tested configs, and a guess for the others: the drawn configs are in no table",
    ),
    Mistake(
        id="09-cheat-prune-table", notebook=_NB, cell=_PRUNE,
        edits=((_PRUNE_LOOP, f"    table = {_PRUNE_TABLE!r}\n"
                             f"    key = (T, head_dim, elem_bytes, bool(causal), limit)\n"
                             f"    if key in table:\n"
                             f"        return [configs[i] for i in table[key]]\n"
                             f"    return [c for c in configs if T % c.kwargs['BLOCK_M'] == 0]\n" + _PRUNE_LOOP),),
        fails=(_T_PRUNE,),
        why="the kept configs of each tested launch by position, and no shared-memory rule for other launches",
    ),
    Mistake(
        id="09-cheat-smem-reference", notebook=_NB, cell=_SMEM,
        edits=((_SMEM_RETURN, "from attnlab.verify_tuning import expected_smem\n"
                              "    return expected_smem(block_m, block_n, num_stages, head_dim, elem_bytes)"),),
        fails=(_T_SMEM, _T_PRUNE),
        why="returns the checker's own model (attnlab.verify_tuning.expected_smem): refused and flagged for review",
    ),
    Mistake(
        id="09-cheat-scales-reference", notebook=_NB, cell=_SCALES,
        edits=((_SCALES_BODY, "    import attnlab.verify_tuning as vt\n"
                              "    s = vt.expected_scales(x, block_rows).float()\n"
                              "    return torch.where(s > 0, s, torch.ones_like(s))\n" + _SCALES_BODY),),
        fails=(_T_SCALES,),
        why="returns the checker's own scales (attnlab.verify_tuning.expected_scales): refused and flagged for review",
    ),
    Mistake(
        id="09-cheat-quantize-div-out", notebook=_NB, cell=_QUANT,
        edits=((_QUANT_RETURN, "return torch.div(x.float(), s, out=torch.empty(x.shape, dtype=torch.float8_e4m3fn))"),),
        fails=(_T_QUANT,),
        why="divides straight into a float8 tensor (out=): values beyond ±448 are converted without a clamp",
    ),
    Mistake(
        id="09-cheat-quantize-complex", notebook=_NB, cell=_QUANT,
        edits=((_QUANT_RETURN, "return (x.float() / s).to(torch.complex64).to(torch.float8_e4m3fn)"),),
        fails=(_T_QUANT,),
        why="casts through a complex dtype, so no float tensor reaches the cast: nothing saturates",
    ),
    Mistake(
        id="09-cheat-quantize-from-list", notebook=_NB, cell=_QUANT,
        edits=((_QUANT_RETURN, "return torch.tensor((x.float() / s).tolist(), dtype=torch.float8_e4m3fn)"),),
        fails=(_T_QUANT,),
        why="builds the float8 tensor from a Python list, where no operator shows what was converted",
    ),
    Mistake(
        id="09-ok-smem-expanded", notebook=_NB, cell=_SMEM,
        edits=((_SMEM_RETURN, "tile = head_dim * elem_bytes\n"
                              "    return block_m * tile + num_stages * (block_n * tile) * 2"),),
        fails=(),
        why="not a mistake: the same model written as Q's tile plus num_stages pairs of K and V tiles",
    ),
    Mistake(
        id="09-ok-prune-comprehension", notebook=_NB, cell=_PRUNE,
        edits=((_PRUNE_LOOP, "    def runs(c):\n"
                             "        bm, bn = c.kwargs['BLOCK_M'], c.kwargs['BLOCK_N']\n"
                             "        whole = T % bm == 0 and T % bn == 0 and not (causal and bm % bn)\n"
                             "        need = smem_estimate(bm, bn, c.num_stages, head_dim, elem_bytes)\n"
                             "        return whole and need <= limit\n"
                             "    return [c for c in configs if runs(c)]\n" + _PRUNE_LOOP),),
        fails=(),
        why="not a mistake: one list comprehension over a predicate instead of a loop with continue",
    ),
    Mistake(
        id="09-ok-scales-loop", notebook=_NB, cell=_SCALES,
        edits=((_SCALES_BODY, "    B, H, T, D = x.shape\n"
                              "    rows = T if block_rows is None else block_rows\n"
                              "    out = torch.ones(B, H, -(-T // rows))\n"
                              "    for i in range(out.shape[2]):\n"
                              "        m = x[:, :, i * rows:(i + 1) * rows].abs().amax(dim=(-2, -1)).float()\n"
                              "        out[:, :, i] = torch.where(m > 0, m / E4M3_MAX, out[:, :, i])\n"
                              "    return out[:, :, 0].contiguous() if block_rows is None else out\n" + _SCALES_BODY),),
        fails=(),
        why="not a mistake: a loop over blocks of rows (a head is one block) instead of padding and reshaping",
    ),
    Mistake(
        id="09-ok-quantize-copy-into", notebook=_NB, cell=_QUANT,
        edits=((_QUANT_RETURN, "out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)\n"
                               "    out.copy_(torch.clamp(x.float() / s, min=-E4M3_MAX, max=E4M3_MAX))\n"
                               "    return out"),),
        fails=(),
        why="not a mistake: clamps, then converts by copying into a float8 tensor instead of .to",
    ),
    Mistake(
        id="09-ok-quantize-where", notebook=_NB, cell=_QUANT,
        edits=((_QUANT_RETURN, "y = x.float() / s\n"
                               "    y = torch.where(y.abs() > E4M3_MAX, torch.sign(y) * E4M3_MAX, y)\n"
                               "    return y.to(torch.float8_e4m3fn)"),),
        fails=(),
        why="not a mistake: saturates with torch.where on the magnitude instead of clamp",
    ),
]

TYPICAL = "09-scale-from-max"
