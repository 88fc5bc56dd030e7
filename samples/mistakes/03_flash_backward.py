"""Typical mistakes in notebook 03 (format: samples/README.md)."""

from attnlab.grading.samples import Mistake

NB, CELL = "03_flash_backward", "flash_attention_backward"

# Test cells of the graded function, for mistakes that break every case.
T_MATCH = "test_flash_backward_matches_autograd"
T_UNEQUAL = "test_flash_backward_unequal_causal_tiles"
T_CROSS = "test_flash_backward_cross_attention_lengths"
T_E2E = "test_autograd_function_end_to_end"
T_GRADCHECK = "test_autograd_gradcheck"
ALL = (T_MATCH, T_UNEQUAL, T_CROSS, T_E2E, T_GRADCHECK)

MISTAKES = [
    Mistake(
        id="03-no-mask-backward", notebook=NB, cell=CELL,
        edits=(('                s = s.masked_fill(cols > rows, float("-inf"))\n', ""),),
        fails=ALL,
        why="masks the scores in the forward only: the recomputed P is positive above the diagonal",
    ),
    Mistake(
        id="03-d-dropped", notebook=NB, cell=CELL,
        edits=(("ds = p * (dp - delta[:, :, i0:i1, None])", "ds = p * dp"),),
        fails=ALL,
        why="leaves out the row term D of the softmax backward: dS = P * dP",
    ),
    Mistake(
        id="03-d-from-tile", notebook=NB, cell=CELL,
        edits=(("ds = p * (dp - delta[:, :, i0:i1, None])",
                "ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))"),),
        fails=ALL,
        why="computes D from the current tile's P and dP, a partial sum over one key tile only",
    ),
    Mistake(
        id="03-d-from-q", notebook=NB, cell=CELL,
        edits=(("delta = (do_ * o_).sum(dim=-1)", "delta = (do_ * q_).sum(dim=-1)"),),
        fails=ALL,
        why="computes D = rowsum(dO * Q) instead of rowsum(dO * O)",
    ),
    Mistake(
        id="03-p-from-tile-max", notebook=NB, cell=CELL,
        edits=(("p = torch.exp(s - lse_[:, :, i0:i1, None])",
                "p = torch.exp(s - s.amax(dim=-1, keepdim=True))"),),
        fails=ALL,
        why="rebuilds P as exp(S - m) with a max and no normaliser, instead of exp(S - LSE)",
    ),
    Mistake(
        id="03-p-exp2", notebook=NB, cell=CELL,
        edits=(("p = torch.exp(s - lse_[:, :, i0:i1, None])",
                "p = torch.exp2(s - lse_[:, :, i0:i1, None])"),),
        fails=ALL,
        why="rebuilds P with a base-2 exponential from the natural-log LSE",
    ),
    Mistake(
        id="03-dq-no-scale", notebook=NB, cell=CELL,
        edits=(("dq[:, :, i0:i1] += (ds @ k_j) * scale", "dq[:, :, i0:i1] += ds @ k_j"),),
        fails=ALL,
        why="forgets the scale factor on dq",
    ),
    Mistake(
        id="03-dk-no-scale", notebook=NB, cell=CELL,
        edits=(("dk_j += (ds.transpose(-1, -2) @ q_i) * scale", "dk_j += ds.transpose(-1, -2) @ q_i"),),
        fails=ALL,
        why="forgets the scale factor on dk",
    ),
    Mistake(
        id="03-dk-from-p", notebook=NB, cell=CELL,
        edits=(("dk_j += (ds.transpose(-1, -2) @ q_i) * scale", "dk_j += (p.transpose(-1, -2) @ q_i) * scale"),),
        fails=ALL,
        why="builds dK from P instead of dS",
    ),
    Mistake(
        id="03-scale-ignored", notebook=NB, cell=CELL,
        edits=(("    if scale is None:\n        scale = D ** -0.5", "    scale = D ** -0.5"),),
        fails=(T_MATCH,),
        why="always uses D ** -0.5 and ignores the scale argument",
    ),
    Mistake(
        id="03-causal-skips-diagonal-tile", notebook=NB, cell=CELL,
        edits=(("i_start = (j0 // block_q) * block_q if causal else 0",
                "i_start = math.ceil(j0 / block_q) * block_q if causal else 0"),),
        fails=(T_UNEQUAL, T_GRADCHECK),
        why="starts at the first query tile beginning at or after j0, skipping the tile that straddles the diagonal",
    ),
]

TYPICAL = "03-d-from-tile"
