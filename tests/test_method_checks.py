"""The method checks of notebooks 01-03, in process (no nbgrader): the probe refuses shortcuts with a
message naming the rule and accepts honest variants; tampering with torch's dispatcher and
number-like answer objects are refused. The sample mistakes (samples/mistakes/) repeat the
shortcuts through the autograder (tests/test_grading.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.checking import integrity, probe
from attnlab import verify
from attnlab.checks import assert_number, require_number
from attnlab.reference import naive_attention


# ------------------------------------------------------------------------------- learner stand-ins
def stats_blocked(x, block_size):
    work = torch.promote_types(x.dtype, torch.float32)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=work)
    l = torch.zeros(x.shape[:-1], dtype=work)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size].to(work)
        m_new = torch.maximum(m, block.amax(dim=-1))
        off = m_new.nan_to_num(neginf=0.0)
        l = l * torch.exp(m - off) + torch.exp(block - off[..., None]).sum(dim=-1)
        m = m_new
    return m, l


def stats_blocked_vectorised(x, block_size):
    """Honest variant: the blocks of every row in one tensor, the running update still block by block."""
    n = x.shape[-1]
    pad = (-n) % block_size
    xp = torch.nn.functional.pad(x.to(torch.float64), (0, pad), value=float("-inf"))
    blocks = xp.unflatten(-1, (-1, block_size))
    m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
    l = torch.zeros(x.shape[:-1], dtype=torch.float64)
    for b in range(blocks.shape[-2]):
        block = blocks[..., b, :]
        m_new = torch.maximum(m, block.amax(dim=-1))
        off = m_new.nan_to_num(neginf=0.0)
        l = l * torch.exp(m - off) + torch.exp(block - off[..., None]).sum(dim=-1)
        m = m_new
    return m, l


def stats_whole_row(x, block_size):
    m = x.amax(dim=-1)
    return m, torch.exp(x - m[..., None]).sum(dim=-1)


def stats_m_zero(x, block_size):
    m = torch.zeros(x.shape[:-1], dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
    return m, l


def flash_tiled(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """Key tiles in the inner loop, every head at once (the course's method)."""
    T_q, T_k, D = q.shape[2], k.shape[2], q.shape[3]
    scale = D ** -0.5 if scale is None else scale
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], dtype=q.dtype)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        m = torch.full(q.shape[:2] + (i1 - i0,), float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(q.shape[:2] + (i1 - i0, D), dtype=q.dtype)
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            s = q[:, :, i0:i1] @ k[:, :, j0:j1].transpose(-1, -2) * scale
            if causal:
                s = s.masked_fill(torch.arange(j0, j1)[None] > torch.arange(i0, i1)[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            off = m_new.nan_to_num(neginf=0.0)
            p = torch.exp(s - off[..., None])
            alpha = torch.exp(m - off)
            l, acc, m = l * alpha + p.sum(-1), acc * alpha[..., None] + p @ v[:, :, j0:j1], m_new
        o[:, :, i0:i1], lse[:, :, i0:i1] = acc / l[..., None], m + torch.log(l)
    return o, lse


def flash_sdpa_only(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """The fused library op for o; the LSE from tiles, so only the attention-op rule can catch it."""
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return o, flash_tiled(q, k, v, causal, block_q, block_k, scale)[1]


def flash_per_head_dense(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """A full score matrix, one head at a time (smaller than B*H*T_q*T_k, still a whole matrix)."""
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], dtype=q.dtype)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            ob, lb = naive_attention(q[b:b + 1, h:h + 1], k[b:b + 1, h:h + 1], v[b:b + 1, h:h + 1], causal, scale)
            o[b, h], lse[b, h] = ob[0, 0], lb[0, 0]
    return o, lse


def flash_row_by_row(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """A shortcut without a score matrix: one query row against all keys, a plain softmax."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], dtype=q.dtype)
    for i in range(q.shape[2]):
        s = (q[:, :, i:i + 1] @ k.transpose(-1, -2) * scale)[:, :, 0]
        if causal:
            s[..., i + 1:] = float("-inf")
        m = s.amax(dim=-1, keepdim=True)
        p = torch.exp(s - m)
        lse[:, :, i] = (m + p.sum(dim=-1, keepdim=True).log())[..., 0]
        o[:, :, i] = (p[:, :, None, :] @ v)[:, :, 0] / p.sum(dim=-1, keepdim=True)
    return o, lse


def flash_numpy(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    o, lse = flash_tiled(q, k, v, causal, block_q, block_k, scale)
    return torch.from_numpy(o.numpy().copy()), lse


def backward_tiled(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    """Key tiles outer (FlashAttention-2's order)."""
    T_q, T_k, D = q.shape[2], k.shape[2], q.shape[3]
    scale = D ** -0.5 if scale is None else scale
    delta = (do * o).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            s = q[:, :, i0:i1] @ k[:, :, j0:j1].transpose(-1, -2) * scale
            if causal:
                s = s.masked_fill(torch.arange(j0, j1)[None] > torch.arange(i0, i1)[:, None], float("-inf"))
            p = torch.exp(s - lse[:, :, i0:i1, None])
            dv[:, :, j0:j1] += p.transpose(-1, -2) @ do[:, :, i0:i1]
            ds = p * (do[:, :, i0:i1] @ v[:, :, j0:j1].transpose(-1, -2) - delta[:, :, i0:i1, None])
            dq[:, :, i0:i1] += ds @ k[:, :, j0:j1] * scale
            dk[:, :, j0:j1] += ds.transpose(-1, -2) @ q[:, :, i0:i1] * scale
    return dq, dk, dv


def backward_row_by_row(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    """A shortcut without a score matrix: one query row against all keys at a time."""
    T_q, D = q.shape[2], q.shape[3]
    scale = D ** -0.5 if scale is None else scale
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(T_q):
        s = (q[:, :, i:i + 1] @ k.transpose(-1, -2)) * scale
        if causal:
            s[..., i + 1:] = float("-inf")
        p = torch.exp(s - lse[:, :, i:i + 1, None])
        dv += p.transpose(-1, -2) @ do[:, :, i:i + 1]
        ds = p * (do[:, :, i:i + 1] @ v.transpose(-1, -2) - (do[:, :, i:i + 1] * o[:, :, i:i + 1]).sum(-1, keepdim=True))
        dq[:, :, i:i + 1] = ds @ k * scale
        dk += ds.transpose(-1, -2) @ q[:, :, i:i + 1] * scale
    return dq, dk, dv


def backward_autograd_tiled(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    with torch.enable_grad():
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        out, _ = flash_tiled(qg, kg, vg, causal, block_q, block_k, scale)
        return torch.autograd.grad(out, (qg, kg, vg), do)


def backward_dense_formulas(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    """The same formulas one head at a time: each head's P is a whole T_q x T_k matrix."""
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for h in range(q.shape[1]):
        sl = (slice(None), slice(h, h + 1))
        g = backward_tiled(q[sl], k[sl], v[sl], o[sl], lse[sl], do[sl], causal, 10**6, 10**6, scale)
        for dst, src in zip(grads, g):
            dst[sl] = src
    return tuple(grads)


def attention_with(backward):
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            o, lse = naive_attention(q, k, v, causal=causal)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal = causal
            return o

        @staticmethod
        def backward(ctx, do):
            return (*backward(*ctx.saved_tensors, do, causal=ctx.causal), None)

    def attn(q, k, v, causal=False, **_blocks):
        return Fn.apply(q, k, v, causal)

    return attn


# ------------------------------------------------------------------------------------------- 01
def test_blockwise_online_softmax_and_vectorised_blocks_pass_every_regime():
    x = torch.randn(4, 43, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3 - 1000
    x[0] = float("-inf")
    x[1, 8:16] = float("-inf")
    for fn in (stats_blocked, stats_blocked_vectorised):
        verify.check_online_softmax(fn, shape=(2, 96), block_size=8)
        verify.check_online_softmax(fn, x=x, block_size=8)


def test_whole_row_reduction_fails_naming_the_rule():
    with pytest.raises(AssertionError, match=r"notebook 01 asks for one pass over blocks.*aten\.amax.*96 elements"):
        verify.check_online_softmax(stats_whole_row, shape=(2, 96), block_size=8)
    # rows too short to tell: no method verdict, the numbers decide
    verify.check_online_softmax(stats_whole_row, shape=(4, 50), block_size=16)


def stats_two_loops(x, block_size):
    """Blocks, but two loops: the max first, then the sum (red team 9: earned full marks)."""
    work = torch.promote_types(x.dtype, torch.float32)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=work)
    for start in range(0, x.shape[-1], block_size):
        m = torch.maximum(m, x[..., start:start + block_size].to(work).amax(dim=-1))
    off, l = m.nan_to_num(neginf=0.0), torch.zeros_like(m)
    for start in range(0, x.shape[-1], block_size):
        l = l + torch.exp(x[..., start:start + block_size].to(work) - off[..., None]).sum(dim=-1)
    return m, l


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_two_loops_over_the_blocks_fail_as_a_second_pass(dtype):
    x = (torch.randn(3, 96, dtype=torch.float64) * 5).to(dtype)
    with pytest.raises(AssertionError, match=r"read element \(0, 0\) of x again after moving on to later blocks"):
        verify.check_online_softmax(stats_two_loops, x=x, block_size=8)
    verify.check_online_softmax(stats_blocked, x=x, block_size=8)
    verify.check_online_softmax(stats_blocked_vectorised, x=x, block_size=8)


def test_running_max_started_at_zero_fails_on_negative_rows():
    verify.check_online_softmax(stats_m_zero, shape=(2, 96), block_size=8)  # positive maxima: invisible
    with pytest.raises(AssertionError, match="running max"):
        negative = -torch.rand(3, 45, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) - 0.5
        verify.check_online_softmax(stats_m_zero, x=negative, block_size=8)
    with pytest.raises(AssertionError, match="entirely -inf"):
        verify.check_online_softmax(stats_m_zero, x=torch.full((2, 9), float("-inf")), block_size=4)


# ------------------------------------------------------------------------------------------- 02
@pytest.mark.parametrize("regime", [None, *verify.REGIMES])
def test_tiled_forward_passes_every_regime(regime):
    verify.check_flash_forward(flash_tiled, T_q=48, block_q=16, block_k=8, causal=regime == "peak_first",
                               regime=regime, B=2, H=2)


def test_fused_attention_op_fails_naming_it():
    with pytest.raises(AssertionError, match=r"notebook 02 asks for tiles: your code called the library's "
                                             r"fused attention \(aten\._scaled_dot_product"):
        verify.check_flash_forward(flash_sdpa_only, T_q=40)


def test_one_head_at_a_time_full_matrix_fails():
    with pytest.raises(AssertionError, match=r"an intermediate of shape \(1, 64, 64\) was built"):
        verify.check_flash_forward(flash_per_head_dense, T_q=64, B=1, H=2)


@pytest.mark.parametrize("causal", [False, True])
def test_row_by_row_plain_softmax_fails_naming_the_rule(causal):
    with pytest.raises(AssertionError, match=r"notebook 02 asks for tiles: one operation \(aten\.amax\.default\) "
                                             r"combined 40 elements per result"):
        verify.check_flash_forward(flash_row_by_row, T_q=40, causal=causal)


def test_row_by_row_backward_fails_naming_the_rule():
    with pytest.raises(AssertionError, match=r"notebook 03 asks for tiles: one operation \(aten\.bmm\.default\) "
                                             r"combined 40 elements per result"):
        verify.check_flash_backward(backward_row_by_row, T_q=40, causal=True)


def test_result_computed_outside_torch_is_flagged_for_review(capsys):
    verify.check_flash_forward(flash_numpy, T_q=40)
    assert "[grader] needs review: flash_attention_forward: returned tensors of shapes [(1, 2, 40, 8)]" \
        in capsys.readouterr().out


def flash_numpy_cloned(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    o, lse = flash_tiled(q, k, v, causal, block_q, block_k, scale)
    return torch.from_numpy(o.numpy().copy()).clone(), lse  # a torch copy of data the probe never saw made


def flash_in_thread(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    import threading

    o, lse = torch.empty_like(q), torch.empty(q.shape[:-1], dtype=q.dtype)  # made under the probe...

    def work():  # ... written by another thread, whose operators the probe does not see
        o_, lse_ = naive_attention(q, k, v, causal=causal, scale=scale)
        o.copy_(o_)
        lse.copy_(lse_)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return o, lse


def test_inference_mode_does_not_hide_a_whole_score_matrix():
    def dense_in_inference_mode(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
        with torch.inference_mode():
            o, lse = naive_attention(q, k, v, causal=causal, scale=scale)
        return o.clone(), lse.clone()

    with pytest.raises(AssertionError, match=r"an intermediate of shape \(1, 2, 64, 64\) was built"):
        verify.check_flash_forward(dense_in_inference_mode, T_q=64)


@pytest.mark.parametrize("fn", [flash_numpy_cloned, flash_in_thread])
def test_result_carried_or_written_from_outside_the_probe_is_flagged(fn, capsys):
    verify.check_flash_forward(fn, T_q=40)
    assert "[grader] needs review: flash_attention_forward: returned tensors of shapes [(1, 2, 40, 8)" \
        in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- 03
def test_tiled_backward_key_tiles_outer_passes():
    for causal in (False, True):
        verify.check_flash_backward(backward_tiled, T_q=45, causal=causal, block_q=11, block_k=16,
                                    regime="far_negative")
    verify.check_autograd_attention(attention_with(backward_tiled), T_q=40, causal=True)
    verify.check_attention_gradcheck(attention_with(backward_tiled), T_q=5, T_k=7, causal=True)


def test_autograd_through_a_tiled_forward_fails_everywhere():
    expected = r"apply the backward formulas yourself, but your code ran autograd's backward"
    with pytest.raises(AssertionError, match=expected):
        verify.check_flash_backward(backward_autograd_tiled, T_q=32)
    with pytest.raises(AssertionError, match=expected):
        verify.check_autograd_attention(attention_with(backward_autograd_tiled), T_q=37)
    with pytest.raises(AssertionError, match=expected):
        verify.check_attention_gradcheck(attention_with(backward_autograd_tiled), T_q=5, T_k=7)


def test_a_backward_that_raises_reports_its_own_error_in_gradcheck():
    # the blank notebook 03: autograd's engine unwinds the probe's dispatch mode itself when the
    # hooked backward raises; the learner must see their NotImplementedError, not a mode-stack error
    def not_written(*_args, **_kwargs):
        raise NotImplementedError("flash_attention_backward")

    with pytest.raises(NotImplementedError, match="flash_attention_backward"):
        verify.check_attention_gradcheck(attention_with(not_written), T_q=5, T_k=7, block_q=2, block_k=3)
    assert torch._C._len_torch_dispatch_stack() == 0


def test_formulas_on_a_whole_p_fail_in_every_check():
    with pytest.raises(AssertionError, match=r"notebook 03 asks for tiles: an intermediate of shape"):
        verify.check_flash_backward(backward_dense_formulas, T_q=32)
    with pytest.raises(AssertionError, match=r"notebook 03 asks for tiles"):
        verify.check_autograd_attention(attention_with(backward_dense_formulas), T_q=64, H=1, D=16)
    with pytest.raises(AssertionError, match=r"notebook 03 asks for tiles"):
        verify.check_attention_gradcheck(attention_with(backward_dense_formulas), T_q=5, T_k=7,
                                         block_q=2, block_k=3)


def stats_adaptive_pool(x, block_size):
    """Red team 9: a 1 x n row pooled to n x 1 covers the whole row in an output as large as the input."""
    n = x.shape[-1]
    m = torch.nn.functional.adaptive_max_pool2d(x.reshape(-1, 1, 1, n), (n, 1)).reshape(*x.shape[:-1], n)[..., 0]
    return m, torch.exp(x - m[..., None]).sum(dim=-1)


def stats_sort_by_keyword(x, block_size):
    """Red team 9: sort's stable overload takes dim by keyword."""
    m = torch.sort(x.movedim(-1, 0), dim=0, stable=True)[0][-1]
    return m, torch.exp(x - m[..., None]).sum(dim=-1)


@pytest.mark.parametrize("fn,op", [(stats_adaptive_pool, "adaptive_max_pool2d"), (stats_sort_by_keyword, "sort")])
def test_pooling_sized_by_its_output_and_keyword_dims_count_the_whole_row(fn, op):
    with pytest.raises(AssertionError, match=rf"one pass over blocks: one operation \(aten\.{op}\.\w+\) combined 96 "):
        verify.check_online_softmax(fn, shape=(2, 96), block_size=8)


def stats_unique_and_layer_norm(x, block_size):
    """Red team 10: the row max read off torch.unique's ranks, the row sum off layer_norm's mean."""
    vals, rank = torch.unique(x, sorted=True, return_inverse=True)
    m = vals[rank.amax(dim=-1)]
    e = torch.exp(x - m[..., None])
    return m, torch.native_layer_norm(e, (x.shape[-1],), None, None, 1e-5)[1].squeeze(-1) * x.shape[-1]


def stats_carry_in_cat(x, block_size):
    """Honest: the running max kept inside a concatenation with the block (block_size + 1 per result)."""
    m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
    l = torch.zeros(x.shape[:-1], dtype=torch.float64)
    for start in range(0, x.shape[-1], block_size):
        block = x.double()[..., start:start + block_size]  # honest too: the whole input copied each time
        m_new = torch.cat([m.unsqueeze(-1), block], dim=-1).amax(dim=-1)
        off = m_new.nan_to_num(neginf=0.0)
        l = l * torch.exp(m - off) + torch.exp(block - off[..., None]).sum(dim=-1)
        m = m_new
    return m, l


def test_unique_and_layer_norm_count_the_whole_row_and_a_carried_max_is_a_block():
    with pytest.raises(AssertionError, match=r"one operation \(aten\._unique2\.default\) combined 192"):
        verify.check_online_softmax(stats_unique_and_layer_norm, shape=(2, 96), block_size=8)
    for shape, block_size in (((97,), 10), ((2, 96), 8)):  # the hidden 1-D case: one row, limit 11
        verify.check_online_softmax(stats_carry_in_cat, x=torch.randn(*shape).float() * 5, block_size=block_size)


def flash_scalar_rows(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """Red team 10: one query row at a time, every statistic a single number (dot products per column)."""
    B, H, T_q, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    o, lse = torch.empty_like(q), torch.empty(B, H, T_q, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T_q):
                n = min(i + 1, k.shape[2]) if causal else k.shape[2]
                s = k[b, h, :n] @ q[b, h, i] * scale
                m = s.max()
                p = torch.exp(s - m)
                for d in range(D):
                    o[b, h, i, d] = torch.dot(p, v[b, h, :n, d]) / p.sum()
                lse[b, h, i] = m + torch.log(p.sum())
    return o, lse


def flash_tiled_with_skip_and_prints(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """Honest: a causal tile skipped when its maximum is -inf, and a debugging print of a statistic."""
    o, lse = flash_tiled(q, k, v, causal, block_q, block_k, scale)
    for i0 in range(0, q.shape[2], block_q):
        for j0 in range(0, k.shape[2], block_k):
            s = q[:, :, i0:i0 + block_q] @ k[:, :, j0:j0 + block_k].transpose(-1, -2)
            if causal:
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1])[None] > torch.arange(i0, i0 + s.shape[-2])[:, None],
                                  float("-inf"))
            if s.max() == float("-inf") or (s.isinf().sum() == s.numel()):
                continue
            print(f"tile ({i0}, {j0}): max {s.max().item():.3f}")
    print(o.abs().max().item())
    return o, lse


def test_one_number_per_tile_is_allowed_but_a_row_at_a_time_one_number_each_is_not(capsys):
    with pytest.raises(AssertionError, match=r"operations reduced more than a tile to one number each"):
        verify.check_flash_forward(flash_scalar_rows, T_q=40, causal=True)
    verify.check_flash_forward(flash_tiled_with_skip_and_prints, T_q=40, causal=True)
    verify.check_flash_forward(flash_tiled_with_skip_and_prints, T_q=45, block_q=8, block_k=7)


#: Honest float causal masks of the whole T_q x T_k (keep = 1), built as students write them (red team 11,
#: a false-positive hunt): they hold no scores, so the size rule ignores them.
MASKS = {
    "tril_ones": lambda q, T_q, T_k: torch.tril(torch.ones(T_q, T_k)),
    "new_ones": lambda q, T_q, T_k: q.new_ones(T_q, T_k).tril(),
    "where_tensor_scalars": lambda q, T_q, T_k: torch.where(torch.ones(T_q, T_k, dtype=torch.bool).tril(),
                                                            torch.tensor(1.0), torch.tensor(0.0)),
    "setitem_triu_indices": lambda q, T_q, T_k: _ones_with_zeros_at(torch.triu_indices(T_q, T_k, offset=1), T_q, T_k),
}


def _ones_with_zeros_at(index, T_q, T_k):
    keep = torch.ones(T_q, T_k)
    keep[index[0], index[1]] = 0.0
    return keep


def flash_tiled_float_bias(q, k, v, causal=False, block_q=16, block_k=16, scale=None, mask="tril_ones"):
    """Honest: a float causal mask of the whole T_q x T_k (``MASKS``), used tile by tile."""
    bias = MASKS[mask](q, q.shape[2], k.shape[2])
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    B, H, T_q, D = q.shape
    o, lse = torch.empty_like(q), torch.empty(B, H, T_q, dtype=q.dtype)
    for i0 in range(0, T_q, block_q):
        m = torch.full((B, H, min(block_q, T_q - i0)), float("-inf"), dtype=q.dtype)
        l, acc = torch.zeros_like(m), torch.zeros(B, H, m.shape[-1], D, dtype=q.dtype)
        for j0 in range(0, k.shape[2], block_k):
            s = q[:, :, i0:i0 + block_q] @ k[:, :, j0:j0 + block_k].transpose(-1, -2) * scale
            if causal:
                s = s.masked_fill(bias[i0:i0 + block_q, j0:j0 + block_k] == 0, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            safe = m_new.nan_to_num(neginf=0.0)
            p = torch.exp(s - safe[..., None])
            alpha = torch.exp(m - safe)
            l, acc, m = l * alpha + p.sum(-1), acc * alpha[..., None] + p @ v[:, :, j0:j0 + block_k], m_new
        o[:, :, i0:i0 + block_q], lse[:, :, i0:i0 + block_q] = acc / l[..., None], m + torch.log(l)
    return o, lse


def backward_index_put(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    """Honest (red team 11): dk accumulated tile by tile with index_put_(accumulate=True)."""
    dq, dk, dv = backward_tiled(q, k, v, o, lse, do, causal, block_q, block_k, scale)
    B, H, T_k, D = k.shape
    dk_again = torch.zeros_like(dk)
    for j0 in range(0, T_k, block_k):
        rows = torch.arange(j0, min(j0 + block_k, T_k))
        dk_again.index_put_((torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], rows[None, None, :]),
                            dk[:, :, j0:j0 + block_k], accumulate=True)
    return dq, dk_again, dv


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_constant_masks_and_accumulating_writes_of_a_tile_are_no_shortcut(mask):
    fn = lambda *a, **kw: flash_tiled_float_bias(*a, **kw, mask=mask)  # noqa: E731
    verify.check_flash_forward(fn, T_q=64, causal=True)
    verify.check_flash_backward(backward_index_put, T_q=40, causal=True)
    combined = probe.MethodProbe._combined  # what red team 11's whole-row operators combine
    assert combined("renorm", (torch.ones(4, 50), float("inf"), 0, 1.0), [torch.ones(4, 50)]) == 50
    assert combined("scatter_", (torch.zeros(2, 3), 1, torch.zeros(2, 9, dtype=torch.long), torch.ones(2, 9)),
                    [torch.zeros(2, 3)], {"reduce": "add"}) == 9
    assert combined("convolution", (torch.ones(1, 10, 5), torch.ones(10, 1, 3), None, [1], [0], [1], True, [0], 1),
                    [torch.ones(1, 1, 7)]) == 30
    assert combined("index_add_", (torch.zeros(5, 4), 0, torch.zeros(7, dtype=torch.long), torch.ones(7, 4)),
                    [torch.zeros(5, 4)]) == 7


def test_tile_rule_only_decides_when_a_score_matrix_is_the_largest_thing():
    assert probe.tile_rule(B=1, H=2, T_q=64, T_k=64, block_q=16, block_k=16, largest_io=2 * 64 * 8) == 4096
    assert probe.tile_rule(B=1, H=1, T_q=20, T_k=20, block_q=32, block_k=32, largest_io=160) is None
    assert probe.row_rule(T_k=40, block_k=16, D=8) == 16 and probe.row_rule(T_k=40, block_k=8, D=16) == 16
    assert probe.row_rule(T_k=9, block_k=16, D=16) is None and probe.row_rule(T_k=12, block_k=64, D=8) is None
    assert probe.row_rule(T_k=12, block_k=16, D=8, T_q=40, block_q=16) == 16  # the backward's columns
    combined = probe.MethodProbe._combined  # red team 10: conv_tbc contracts width x channels, addbmm batch x inner
    assert combined("conv_tbc", (torch.ones(1, 3, 10), torch.ones(1, 10, 4), torch.zeros(4), 12), [torch.ones(25, 3, 4)]) == 10
    assert combined("addbmm", (torch.ones(2, 2), torch.ones(5, 2, 8), torch.ones(5, 8, 2)), [torch.ones(2, 2)]) == 40
    assert probe.reduce_rule(n_rows=4, block_size=16, n=50) is None
    assert probe.reduce_rule(n_rows=2, block_size=8, n=96) == 18


# ------------------------------------------------------------------------------------- tampering
@pytest.mark.filterwarnings("ignore:Warning only once")
def test_torch_library_override_is_refused_until_removed(capsys):
    lib = torch.library.Library("aten", "IMPL")  # the attack under test
    try:
        lib.impl("sub.Tensor", lambda a, b, alpha=1: torch.zeros_like(a), "CPU")
        with pytest.raises(AssertionError, match=r"refuse to run while torch's operators are altered.*aten::sub"):
            verify.check_online_softmax(stats_blocked, shape=(2, 96), block_size=8)
        assert "[grader] needs review: torch was tampered with" in capsys.readouterr().out
    finally:
        lib._destroy()
    assert integrity.problems() == []
    verify.check_online_softmax(stats_blocked, shape=(2, 96), block_size=8)


def test_mode_left_active_by_learner_code_is_refused():
    from torch.overrides import TorchFunctionMode

    class Zero(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def leaves_a_mode(x, block_size):
        Zero().__enter__()
        return stats_blocked(x, block_size)

    try:
        with pytest.raises(AssertionError, match="torch function mode"):
            verify.check_online_softmax(leaves_a_mode, shape=(2, 96), block_size=8)
    finally:
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()


def test_prediction_answers_accept_plain_numbers_only():
    for ok in (3, 2.5, np.float64(4.0), np.int64(4), np.float32(4.0), torch.tensor(4.0), torch.tensor([4])):
        require_number(ok, "x")
    assert_number(np.int64(512), 512, name="x")

    class Sneaky(float):
        def __float__(self):
            return 512.0  # what a frame-reading __float__ would return

    class SneakyNp(np.float64):
        pass

    for bad in (Sneaky(1.0), SneakyNp(512.0), True, "512", None, torch.tensor(True), torch.tensor([1.0, 2.0])):
        with pytest.raises(AssertionError, match="expected a plain number"):
            assert_number(bad, 512, name="x")


@pytest.mark.parametrize("line,flagged", [
    ("lib = torch.library.Library('aten', 'IMPL')", True),
    ("from torch.library import impl", True),
    ("torch.ops.aten.sub.Tensor.py_impl(torch._C.DispatchKey.CPU)(zeros)", True),
    ("h = torch._C._dispatch_library('IMPL', 'aten', '')", True),
    ("class M(TorchDispatchMode): pass", True),
    ("from torch.overrides import TorchFunctionMode", True),
    ("expected = sys._getframe(1).f_locals['expected']", True),
    ("frame = inspect.currentframe().f_back", True),
    ("g.gi_frame", True),
    ("def __float__(self): return 1.0", False),
    ("library_size = 3; stack = [frame_count]", False),
    ("m_new = torch.maximum(m, block.amax(dim=-1))", False),
    # red team 9: text paths any resolver turns into objects, NumPy views written in place, patched numpy
    ('pydoc.locate("builtins.object.__setattr__")(p, "x", None)', True),
    ('n = locate("torch._C._len_torch_dispatch_stack")()', True),
    ('from traitlets.utils.importstring import import_item', True),
    ('BaseConfigurator({}).resolve("attnlab.checks.TOL")', True),
    ('path = "torch._" + "C"', True),
    ('from logging import config', True),
    ("np.copyto(np.asarray(o), result)", True),
    ("class A:\n    __array_interface__ = property(lambda self: {})", True),
    ("np.bincount = lambda a, minlength=0, weights=None: a", True),
    ("import numpy\nnumpy.unique = sorted", True),
    ("x = np.array([1.0, 2.0]); torch.backends.cuda.matmul.allow_tf32 = True", False),
    ('plt.plot(x, label="_nolegend_"); name = "_".join(["a", "b"]); ok = __name__ == "__main__"', False),
    ("# locate the diagonal tile\nimport numpy\nprint(numpy.pi, np.asarray([1.0, 2.0]), f'{3.5:._>10}')", False),
    ('import sys, io\nsys.stdout = io.StringIO(); d = {"_acc": 1, "_dtype": 2}', False),
])
def test_static_scan_flags_dispatcher_overrides_and_frame_access(line, flagged):
    import nbformat

    from attnlab.grading.worker.scan import scan

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(line)])
    assert bool(scan(nb)) is flagged, scan(nb)
