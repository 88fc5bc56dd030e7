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

# Shortcuts (right gradients, not the method the notebook teaches) and value-regime bugs.
BODY = "    T_q, D = q.shape[2], q.shape[3]\n"
AUTOGRAD = """    with torch.enable_grad():
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        o_dense, _ = naive_attention(qg, kg, vg, causal=causal, scale=scale)
        return torch.autograd.grad(o_dense, (qg, kg, vg), do)
"""
VJP = """    o_dense, pullback = torch.func.vjp(lambda a, b, c: naive_attention(a, b, c, causal=causal, scale=scale)[0],
                                       q, k, v)
    return pullback(do)
"""
DENSE = """    sc = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * sc
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(s - lse[..., None])
    dp = do @ v.transpose(-1, -2)
    ds = p * (dp - (do * o).sum(dim=-1, keepdim=True))
    return (ds @ k) * sc, (ds.transpose(-1, -2) @ q) * sc, p.transpose(-1, -2) @ do
"""
# a correct tiled forward (online softmax) differentiated by autograd: no backward formulas at all
TILED_AUTOGRAD = """    T_k, sc = k.shape[2], q.shape[-1] ** -0.5 if scale is None else scale
    with torch.enable_grad():
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        rows = []
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            m = torch.full(qg.shape[:2] + (i1 - i0,), float("-inf"), dtype=q.dtype)
            l = torch.zeros(qg.shape[:2] + (i1 - i0,), dtype=q.dtype)
            acc = torch.zeros(qg.shape[:2] + (i1 - i0, qg.shape[3]), dtype=q.dtype)
            for j0 in range(0, min(i1, T_k) if causal else T_k, block_k):
                j1 = min(j0 + block_k, T_k)
                s = (qg[:, :, i0:i1] @ kg[:, :, j0:j1].transpose(-1, -2)) * sc
                if causal:
                    hide = torch.arange(j0, j1)[None, :] > torch.arange(i0, i1)[:, None]
                    s = s.masked_fill(hide, float("-inf"))
                m_new = torch.maximum(m, s.amax(dim=-1))
                p = torch.exp(s - m_new[..., None])
                alpha = torch.exp(m - m_new)
                l = l * alpha + p.sum(dim=-1)
                acc = acc * alpha[..., None] + p @ vg[:, :, j0:j1]
                m = m_new
            rows.append(acc / l[..., None])
        return torch.autograd.grad(torch.cat(rows, dim=2), (qg, kg, vg), do)
"""
ROW_BY_ROW = """    sc = q.shape[-1] ** -0.5 if scale is None else scale
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(q.shape[2]):  # one query row against every key: never a whole P
        s = (q[:, :, i:i + 1] @ k.transpose(-1, -2)) * sc
        if causal:
            s[..., i + 1:] = float("-inf")
        p = torch.exp(s - lse[:, :, i:i + 1, None])
        dv += p.transpose(-1, -2) @ do[:, :, i:i + 1]
        ds = p * (do[:, :, i:i + 1] @ v.transpose(-1, -2) - (do[:, :, i:i + 1] * o[:, :, i:i + 1]).sum(-1, keepdim=True))
        dq[:, :, i:i + 1] = (ds @ k) * sc
        dk += (ds.transpose(-1, -2) @ q[:, :, i:i + 1]) * sc
    return dq, dk, dv
"""
MISTAKES += [
    Mistake("03-row-by-row", NB, CELL, ((BODY, ROW_BY_ROW + BODY),), ALL,
            "applies the formulas one query row at a time against all keys: no score matrix, no tiles"),
    Mistake("03-autograd-dense", NB, CELL, ((BODY, AUTOGRAD + BODY),), ALL,
            "differentiates naive_attention with torch.autograd.grad"),
    Mistake("03-func-vjp-dense", NB, CELL, ((BODY, VJP + BODY),), ALL,
            "differentiates naive_attention with torch.func.vjp"),
    Mistake("03-formulas-on-dense-p", NB, CELL, ((BODY, DENSE + BODY),), ALL,
            "applies the right formulas to the whole T_q x T_k matrix P at once"),
    Mistake("03-autograd-tiled-forward", NB, CELL, ((BODY, BODY + TILED_AUTOGRAD),), ALL,
            "runs a tiled forward under autograd and differentiates it: no backward formulas"),
    Mistake("03-p-as-exp-ratio", NB, CELL,
            (("p = torch.exp(s - lse_[:, :, i0:i1, None])", "p = torch.exp(s) / torch.exp(lse_[:, :, i0:i1, None])"),),
            (T_MATCH, T_UNEQUAL, T_CROSS),
            "rebuilds P as exp(S) / exp(LSE): 0 / 0 on rows of scores near -1000"),
    # Correct: the same formulas, without skipping the tiles the causal mask hides.
    Mistake("03-ok-no-causal-skip", NB, CELL,
            (("i_start = (j0 // block_q) * block_q if causal else 0", "i_start = 0"),), (),
            "visits every query tile for every key tile (no causal skip; the mask zeroes P)"),
]
