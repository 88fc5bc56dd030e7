"""Typical mistakes in notebook 01 (format: samples/README.md)."""

from attnlab.grading.samples import Mistake

MISTAKES = [
    Mistake(
        id="01-no-rescale", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=(("l = l * torch.exp(m - offset) + ", "l = l + "),),
        fails=("test_online_softmax_matches_logsumexp", "test_online_softmax_handles_growing_max"),
        why="forgets to rescale l when the running max grows",
    ),
    Mistake(
        id="01-no-inf-guard", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=(("offset = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)", "offset = m_new"),),
        fails=("test_online_softmax_handles_growing_max",),
        why="computes exp(-inf - (-inf)) on a leading block that is entirely masked",
    ),
    Mistake(
        id="01-two-pass-overflow", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=(("l = l * torch.exp(m - offset) + torch.exp(block - offset[..., None]).sum(dim=-1)",
                "l = l + torch.exp(block).sum(dim=-1)"),
               ("    return m, l", "    return m, l * torch.exp(-m)")),
        fails=("test_online_softmax_matches_logsumexp", "test_online_softmax_handles_growing_max"),
        why="sums exp(x) without subtracting the max: overflows at x = 1000, underflows to 0 at x = -1000",
    ),
]

TYPICAL = "01-no-rescale"

# Correct solutions written differently: they must keep every point.
MISTAKES += [
    Mistake(
        id="01-ok-float64-statistics", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=(("stat_dtype = torch.promote_types(x.dtype, torch.float32)", "stat_dtype = torch.float64"),),
        fails=(), why="keeps m and l in float64 whatever the input dtype",
    ),
    Mistake(
        id="01-ok-nan-to-num-guard", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=(("offset = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)",
                "offset = m_new.nan_to_num(neginf=0.0)"),),
        fails=(), why="guards the all-masked case with nan_to_num instead of torch.where",
    ),
]

# Shortcuts and value-regime bugs: right numbers on most rows, but not the method or not every regime.
_BODY = "    stat_dtype = torch.promote_types(x.dtype, torch.float32)\n"
MISTAKES += [
    Mistake(
        id="01-whole-row-at-once", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=((_BODY, _BODY + "    xs = x.to(stat_dtype)\n    m = xs.amax(dim=-1)\n"
                "    return m, torch.exp(xs - m.nan_to_num(neginf=0.0)[..., None]).sum(dim=-1)\n"),),
        fails=("test_online_softmax_matches_logsumexp", "test_online_softmax_handles_growing_max"),
        why="takes the max and the sum of the whole row at once, ignoring block_size (two passes, right numbers)",
    ),
    Mistake(
        id="01-exp-logsumexp", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=((_BODY, _BODY + "    xs = x.to(stat_dtype)\n    m = xs.amax(dim=-1)\n"
                "    return m, torch.exp(torch.logsumexp(xs, dim=-1) - m).nan_to_num(nan=0.0)\n"),),
        fails=("test_online_softmax_matches_logsumexp", "test_online_softmax_handles_growing_max"),
        why="returns l = exp(logsumexp(x) - max(x)) from library reductions over the whole row",
    ),
    Mistake(
        id="01-two-loops-over-blocks", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=((_BODY, _BODY + "    m = torch.full(x.shape[:-1], float('-inf'), dtype=stat_dtype, device=x.device)\n"
                "    for start in range(0, x.shape[-1], block_size):  # first pass: the max\n"
                "        m = torch.maximum(m, x[..., start:start + block_size].to(stat_dtype).amax(dim=-1))\n"
                "    offset, l = m.nan_to_num(neginf=0.0), torch.zeros_like(m)\n"
                "    for start in range(0, x.shape[-1], block_size):  # second pass: the sum\n"
                "        l = l + torch.exp(x[..., start:start + block_size].to(stat_dtype) - offset[..., None]).sum(dim=-1)\n"
                "    return m, l\n"),),
        fails=("test_online_softmax_matches_logsumexp", "test_online_softmax_handles_growing_max"),
        why="reads the blocks twice, a loop for the max and another for the sum: right numbers, not one pass",
    ),
    Mistake(
        id="01-m-init-zero", notebook="01_online_softmax", cell="online_softmax_stats",
        edits=(('m = torch.full(x.shape[:-1], float("-inf"), dtype=stat_dtype, device=x.device)',
                "m = torch.zeros(x.shape[:-1], dtype=stat_dtype, device=x.device)"),),
        fails=("test_online_softmax_matches_logsumexp", "test_online_softmax_handles_growing_max"),
        why="starts the running max at 0 instead of -inf: wrong on rows whose entries are all negative",
    ),
]

