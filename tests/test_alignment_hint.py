"""Causal alignment when T_q != T_k: a forward aligned at the bottom-right corner is told so.

Case 06 of /work/shared/reports (pytorch#108108): a notebook-02 forward that uses flash-attn 2.1's
bottom-right alignment failed a hidden check with "relative error 0.9" and nothing more.
"""

import pytest
import torch

from attnlab.checking.hints import causal_alignment_hint, causal_attention_aligned
from attnlab.reference import naive_attention
from attnlab.verify import check_flash_forward


def _masked_attention(q, k, v, causal, scale=None, shift=0):
    """Attention written out with its own mask (query i sees keys j <= i + shift), independent of the package."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(q.shape[2])[:, None]
        j = torch.arange(k.shape[2])[None, :]
        s = s.masked_fill(j > i + shift, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse


def bottom_right_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """The learner's mistake: causal means j <= i + T_k - T_q (rows that see no key come out NaN)."""
    return _masked_attention(q, k, v, causal, scale, shift=k.shape[2] - q.shape[2])


def non_causal_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    return _masked_attention(q, k, v, False, scale)


@pytest.mark.parametrize("t_q, t_k", [(12, 30), (13, 37), (37, 13), (1, 50)])
def test_bottom_right_forward_is_named_in_the_message(t_q, t_k):
    with pytest.raises(AssertionError) as info:
        # one key tile per row (block_k >= T_k): the probe has nothing to decide for this dense stand-in
        check_flash_forward(bottom_right_forward, T_q=t_q, T_k=t_k, causal=True, block_q=7, block_k=64)
    msg = str(info.value)
    assert "aligned at the bottom-right corner" in msg and "j <= i + T_k - T_q" in msg, msg
    assert "asks for the top-left alignment" in msg and "is_causal" in msg, msg


def test_other_wrong_outputs_get_no_alignment_hint():
    # wrong in another way (no mask at all): the message must not blame the alignment
    with pytest.raises(AssertionError) as info:
        check_flash_forward(non_causal_forward, T_q=12, T_k=30, causal=True, block_k=32)
    assert "bottom-right" not in str(info.value)
    # T_q == T_k cannot tell the alignments apart, and the bottom-right forward is right there (one
    # tile covers the whole matrix, so the method probe has nothing to decide for this dense forward)
    check_flash_forward(bottom_right_forward, T_q=20, causal=True, block_q=32, block_k=32)


def test_aligned_reference_matches_an_independent_mask():
    g = torch.Generator().manual_seed(0)
    for t_q, t_k in ((5, 9), (9, 5), (6, 6), (1, 4)):
        q = torch.randn(1, 2, t_q, 8, generator=g, dtype=torch.float64)
        k, v = (torch.randn(1, 2, t_k, 8, generator=g, dtype=torch.float64) for _ in range(2))
        o, lse, defined = causal_attention_aligned(q, k, v, "bottom-right")
        o_exp, lse_exp = _masked_attention(q, k, v, True, shift=t_k - t_q)
        assert defined.tolist() == [i + t_k - t_q >= 0 for i in range(t_q)]
        torch.testing.assert_close(o[:, :, defined], o_exp[:, :, defined])
        torch.testing.assert_close(lse[:, :, defined], lse_exp[:, :, defined])
        assert torch.isnan(o[:, :, ~defined]).all()
        o_tl, _, _ = causal_attention_aligned(q, k, v, "top-left")
        torch.testing.assert_close(o_tl, naive_attention(q, k, v, causal=True)[0])


def test_hint_ignores_tensor_subclasses_and_equal_lengths():
    q, k, v = (torch.randn(1, 1, 4, 8, dtype=torch.float64) for _ in range(3))
    o, _ = bottom_right_forward(q, k[:, :, :3], v[:, :, :3], causal=True)
    assert causal_alignment_hint(o, q, k, v, scale=None, tol=1e-10) == ""  # T_q == T_k

    class Sneaky(torch.Tensor):
        pass

    k2, v2 = (torch.randn(1, 1, 9, 8, dtype=torch.float64) for _ in range(2))
    o2, _ = bottom_right_forward(q, k2, v2, causal=True)
    assert causal_alignment_hint(o2, q, k2, v2, scale=None, tol=1e-10)
    assert causal_alignment_hint(o2.as_subclass(Sneaky), q, k2, v2, scale=None, tol=1e-10) == ""


def test_alignment_hints_are_quiet_like_the_others():
    """A hint that fails (odd device or values of a learner's output) gives "", never its own error."""
    from attnlab.verify_decode import top_left_hint

    q, k, v = (torch.randn(1, 1, t, 4, dtype=torch.float64) for t in (3, 5, 5))
    meta = torch.empty(1, 1, 3, 4, device="meta")  # cannot be copied to compare: the comparison raises
    assert causal_alignment_hint(meta, q, k, v, scale=None, tol=1e-6) == ""

    def reference(align):
        raise RuntimeError("the reference could not be built")

    assert top_left_hint(reference, (q,), 1e-6)() == ""
