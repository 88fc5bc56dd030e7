"""Notebook 09's given kernel in FP8 on a GPU (FP8 does not run under Triton's CPU interpreter; the
block-scale indexing is checked there in float32 by tests/test_tuning.py): per-head and per-block scales,
against float64 attention of the dequantised inputs."""

from __future__ import annotations

import pytest
import torch

from attnlab import launch_tuning
from attnlab.reference import naive_attention
from attnlab.verify_tuning import expected_scales, saturated

from .test_fast_path import _tuned_kernel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _spread(scale: torch.Tensor, block_rows, T: int) -> torch.Tensor:
    if block_rows is None:
        return scale.double()[:, :, None, None]
    return scale.double().repeat_interleave(block_rows, dim=2)[:, :, :T, None]


@pytest.mark.parametrize("block_rows, use_tma", [(None, False), (16, False), (64, False), (256, False),
                                                 (None, True), (64, True)])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_forward_matches_float64_on_the_dequantised_inputs(block_rows, use_tma, causal):
    B, H, T, D = 2, 4, 512, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", generator=g) for _ in range(3))
    q[:, :, 64:128] *= 8    # blocks of very different size: a wrong scale index shows at once
    k[:, :, 300:320] *= 1 / 16
    qs, ks = expected_scales(q, block_rows).float(), expected_scales(k, block_rows).float()
    q8, k8 = (saturated(x, _spread(s, block_rows, T)).to(torch.float8_e4m3fn) for x, s in ((q, qs), (k, ks)))
    v = v.bfloat16()
    o, lse = launch_tuning.launch_tuned_forward(
        _tuned_kernel(), q8, k8, v, causal, q_scale=qs, k_scale=ks, block_rows=block_rows, use_tma=use_tma,
        config=dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3))
    o_ref, lse_ref = naive_attention(q8.double() * _spread(qs, block_rows, T), k8.double() * _spread(ks, block_rows, T),
                                     v.double(), causal=causal)
    # Hopper's FP8 tensor cores add products with fewer bits than float32 (about 14: DeepSeek-V3's report,
    # section 3.3.2), so scores are off by ~1e-4 of the sum of |products|; a wrong scale is off by units
    assert float((lse.double() - lse_ref).abs().max()) < 3e-2
    assert float((o.double() - o_ref).abs().max()) < 3e-2
