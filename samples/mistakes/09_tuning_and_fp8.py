"""Typical mistakes in notebook 09 (format: samples/README.md).

Entries whose ``fails`` is empty are not mistakes: they are correct helpers written differently from
the reference (a tiny floor instead of 1.0 for an all-zero head's scale; multiplying by the
reciprocal of the scale, which rounds a few values to the other E4M3 neighbour), which must keep
every point.
"""

from attnlab.grading.samples import Mistake

_NB = "09_tuning_and_fp8"
_SCALES, _QUANT, _SMEM, _PRUNE = "fp8_scales", "quantize_fp8", "smem_estimate", "prune_configs"
_T_SCALES, _T_QUANT = "test_fp8_scales", "test_quantize_fp8"
_T_SMEM, _T_PRUNE = "test_smem_estimate", "test_prune_configs"

_HEAD_AMAX = "amax = x.abs().amax(dim=(-2, -1)).float()"
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
]

TYPICAL = "09-scale-from-max"
