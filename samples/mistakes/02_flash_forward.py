"""Typical mistakes in notebook 02 (format: samples/README.md), and correct variants that must pass."""

from attnlab.grading.samples import Mistake

NB, CELL = "02_flash_forward", "flash_attention_forward"
ALL = ("test_flash_forward_matches_naive", "test_flash_forward_causal_tiles",
       "test_flash_forward_cross_attention_lengths", "test_flash_forward_lse_dtype")

MISTAKES = [
    Mistake("02-acc-not-rescaled", NB, CELL,
            (("acc = acc * alpha[..., None] + p @", "acc = acc + p @"),), ALL,
            "forgets to rescale acc when the running max grows"),
    Mistake("02-l-not-rescaled", NB, CELL,
            (("l = l * alpha + p.sum(dim=-1)", "l = l + p.sum(dim=-1)"),), ALL,
            "forgets to rescale l when the running max grows"),
    Mistake("02-causal-skip-off-by-one", NB, CELL,
            (("k_end = min(i1, T_k) if causal else T_k", "k_end = min(i1 // block_k * block_k, T_k) if causal else T_k"),),
            ALL, "stops at the last key tile that ends before i1, dropping the diagonal tile when blocks differ"),
    Mistake("02-no-diagonal-mask", NB, CELL,
            (("if causal and j1 - 1 > i0:", "if False:"),), ALL,
            "skips the tiles above the diagonal but forgets to mask the diagonal tile"),
    Mistake("02-lse-log2", NB, CELL,
            (("lse[:, :, i0:i1] = m + torch.log(l)", "lse[:, :, i0:i1] = m + torch.log2(l)"),), ALL,
            "returns the LSE in the wrong base"),
    Mistake("02-lse-without-log-l", NB, CELL,
            (("lse[:, :, i0:i1] = m + torch.log(l)", "lse[:, :, i0:i1] = m"),), ALL,
            "returns the running max as the LSE"),
    Mistake("02-stats-in-input-dtype", NB, CELL,
            (("work = torch.promote_types(q.dtype, torch.float32)", "work = q.dtype"),),
            ("test_flash_forward_lse_dtype",), "keeps the statistics (and the LSE) in float16 for float16 inputs"),
    Mistake("02-assumes-tq-equals-tk", NB, CELL,
            (("T_k = k.shape[2]", "T_k = q.shape[2]"),), ("test_flash_forward_cross_attention_lengths",),
            "assumes T_q == T_k"),
    Mistake("02-ragged-tile-dropped", NB, CELL,
            (("for j0 in range(0, k_end, block_k):", "for j0 in range(0, k_end - block_k + 1, block_k):"),), ALL,
            "visits only whole key tiles, dropping a ragged last tile"),
    Mistake("02-reverse-order-no-guard", NB, CELL,
            (("for j0 in range(0, k_end, block_k):", "for j0 in reversed(range(0, k_end, block_k)):"),),
            ("test_flash_forward_causal_tiles", "test_flash_forward_cross_attention_lengths",
             "test_flash_forward_lse_dtype"),
            "visits key tiles last-to-first without guarding exp(-inf - (-inf))"),
    Mistake("02-causal-bottom-right", NB, CELL,
            (("k_end = min(i1, T_k) if causal else T_k", "k_end = min(i1 + T_k - T_q, T_k) if causal else T_k"),
             ("if causal and j1 - 1 > i0:", "if causal:"),
             ('s = s.masked_fill(cols > rows, float("-inf"))', 's = s.masked_fill(cols > rows + (T_k - T_q), float("-inf"))')),
            ("test_flash_forward_cross_attention_lengths",),
            "aligns the causal mask at the bottom-right corner (KV-cache decoding) instead of SDPA's top-left"),
    # Correct solutions written differently: they must keep every point.
    Mistake("02-ok-reverse-order-guarded", NB, CELL,
            (("for j0 in range(0, k_end, block_k):", "for j0 in reversed(range(0, k_end, block_k)):"),
             ("alpha = torch.exp(m - m_new)  # m_new is finite: key 0 was in the first tile visited\n"
              "            p = torch.exp(s - m_new[..., None])",
              "safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)\n"
              "            alpha = torch.exp(m - safe)\n"
              "            p = torch.exp(s - safe[..., None])")),
            (), "visits key tiles last-to-first, with a guard for fully masked rows"),
    Mistake("02-ok-float64-statistics", NB, CELL,
            (("work = torch.promote_types(q.dtype, torch.float32)", "work = torch.float64"),),
            (), "keeps every statistic in float64 whatever the input dtype"),
]

TYPICAL = "02-causal-skip-off-by-one"

# Shortcuts (right numbers, not the method the notebook teaches) and value-regime bugs.
BODY = "    B, H, T_q, D = q.shape\n"
SDPA = """    import torch.nn.functional as F
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    work = torch.promote_types(q.dtype, torch.float32)
    s = (q.to(work) @ k.to(work).transpose(-1, -2)) * sc
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sc), torch.logsumexp(s, dim=-1)
"""
INLINE = """    sc = q.shape[-1] ** -0.5 if scale is None else scale
    work = torch.promote_types(q.dtype, torch.float32)
    s = (q.to(work) @ k.to(work).transpose(-1, -2)) * sc
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return (torch.exp(s - lse[..., None]) @ v.to(work)).to(q.dtype), lse
"""
ROW_BY_ROW = """    sc = q.shape[-1] ** -0.5 if scale is None else scale
    work = torch.promote_types(q.dtype, torch.float32)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=work, device=q.device)
    for i in range(q.shape[2]):  # one query row against every key: never a whole score matrix
        s = (q[:, :, i:i + 1].to(work) @ k.to(work).transpose(-1, -2)) * sc
        if causal:
            s[..., i + 1:] = float("-inf")
        lse[:, :, i] = torch.logsumexp(s, dim=-1)[..., 0]
        o[:, :, i:i + 1] = (torch.softmax(s, dim=-1) @ v.to(work)).to(q.dtype)
    return o, lse
"""
MISTAKES += [
    Mistake("02-sdpa-shortcut", NB, CELL, ((BODY, SDPA + BODY),), ALL,
            "calls scaled_dot_product_attention and takes the LSE from the full score matrix"),
    Mistake("02-calls-naive", NB, CELL,
            ((BODY, "    return naive_attention(q, k, v, causal=causal, scale=scale)\n" + BODY),), ALL,
            "returns the support package's naive_attention"),
    Mistake("02-naive-alias", NB, CELL,
            ((BODY, "    from attnlab.reference import naive_attention as _dense\n"
                    "    return _dense(q, k, v, causal=causal, scale=scale)\n" + BODY),), ALL,
            "calls naive_attention under another name"),
    Mistake("02-one-big-tile", NB, CELL,
            (("    T_k = k.shape[2]\n",
              "    T_k = k.shape[2]\n    block_q, block_k = T_q, T_k  # one tile does it\n"),),
            ALL, "ignores the block sizes: one T_q x T_k tile"),
    Mistake("02-full-scores-inline", NB, CELL, ((BODY, INLINE + BODY),), ALL,
            "writes the whole score matrix inline (matmul, logsumexp, exp, matmul)"),
    Mistake("02-row-by-row-softmax", NB, CELL, ((BODY, ROW_BY_ROW + BODY),), ALL,
            "computes one query row at a time with a plain softmax over all keys: no score matrix, "
            "and no online softmax either"),
    Mistake("02-m-init-zero", NB, CELL,
            (('m = torch.full((B, H, i1 - i0), float("-inf"), dtype=work, device=q.device)',
              "m = torch.zeros(B, H, i1 - i0, dtype=work, device=q.device)"),),
            ALL[:3], "starts the running max at 0: rows whose scores are all near -1000 underflow to 0 / 0"),
    Mistake("02-max-of-tile-only", NB, CELL,
            (("m_new = torch.maximum(m, s.amax(dim=-1))", "m_new = s.amax(dim=-1)"),),
            ALL, "takes the max of the current tile instead of the running max: the rescale overflows "
                 "after a tile of much larger scores"),
    # Correct: einsum for both products, and a guard that reduces a whole tile of maxima to one bool.
    Mistake("02-ok-einsum-with-guard", NB, CELL,
            (("s = q_tile @ k[:, :, j0:j1].to(work).transpose(-1, -2) * scale",
              's = torch.einsum("bhqd,bhkd->bhqk", q_tile, k[:, :, j0:j1].to(work)) * scale'),
             ("acc = acc * alpha[..., None] + p @ v[:, :, j0:j1].to(work)",
              'acc = acc * alpha[..., None] + torch.einsum("bhqk,bhkd->bhqd", p, v[:, :, j0:j1].to(work))'),
             ("            m = m_new\n",
              "            m = m_new\n            assert not torch.isneginf(m).any(), \"key 0 is in the first tile\"\n")),
            (), "computes both products with einsum and asserts with .any() that every running max is finite"),
    # Correct: the same tiles in another order.
    Mistake("02-ok-query-tiles-reversed", NB, CELL,
            (("    for i0 in range(0, T_q, block_q):\n        i1 = min(i0 + block_q, T_q)\n        q_tile",
              "    for i0 in reversed(range(0, T_q, block_q)):\n        i1 = min(i0 + block_q, T_q)\n        q_tile"),),
            (), "visits the query tiles last-to-first (the order of query tiles does not matter)"),
]
