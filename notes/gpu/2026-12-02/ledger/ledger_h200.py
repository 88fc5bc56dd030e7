"""On a GPU host: the work ledger runs on the CPU-sized cases (interpreted twins) of 04, 05, 07 and 08, the
reference and honest variants pass, each issue-30 shortcut fails naming its rule; one GPU-sized case per
notebook still runs compiled (no ledger there; 07's source scan stands in for the race check)."""
import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402

from attnlab import device  # noqa: E402

RT = device.init(verbose=False)
print("interpret:", RT.interpret, "device:", RT.device, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
from tests import test_triton_method as t  # noqa: E402  (its helpers only: pytest is not run here)
from attnlab.verify import check_flash_kernel, check_softmax_kernel  # noqa: E402
from attnlab.verify_backward import check_flash_backward_kernels  # noqa: E402
from attnlab.verify_decode import check_decode_partial_kernel  # noqa: E402


def bwd(mid=None):
    m = t.load("07_triton_backward", mid)
    return m._bwd_preprocess_kernel, m._bwd_dkdv_kernel, m._bwd_dq_kernel


def dec(mid=None):
    return t.load("08_flash_decoding", mid)._decode_partial_kernel


RUNS = [
    # (mistake or None, kernel getter, check, case, should fail)
    (None, t.softmax_kernel, check_softmax_kernel, dict(n_rows=4, n_cols=37), False),
    ("04-atomic-passes", t.softmax_kernel, check_softmax_kernel, dict(n_rows=4, n_cols=37), True),
    (None, t.flash_kernel, check_flash_kernel, dict(T=37, D=32, causal=True), False),
    ("05-ok-reversed-tiles", t.flash_kernel, check_flash_kernel, dict(T=64, D=16, causal=True, block_m=32, block_n=16), False),
    ("05-atomic-two-pass", t.flash_kernel, check_flash_kernel, dict(T=37, D=32, causal=True), True),
    ("05-one-key-no-dot", t.flash_kernel, check_flash_kernel, dict(T=37, D=32, causal=True), True),
    (None, bwd, check_flash_backward_kernels, dict(T=37, D=32, causal=True), False),
    ("07-ok-dq-by-atomics", bwd, check_flash_backward_kernels, dict(T=64, D=16, causal=True, block_m=32, block_n=16), False),
    ("07-causal-no-skip", bwd, check_flash_backward_kernels, dict(T=64, D=32, causal=True), True),
    ("07-program-0-does-all", bwd, check_flash_backward_kernels, dict(T=64, D=32, causal=False), True),
    ("07-one-key-elementwise", bwd, check_flash_backward_kernels, dict(T=32, D=16, causal=True), True),
    ("07-dq-keyword-race", bwd, check_flash_backward_kernels, dict(T=32, D=16, causal=False), True),
    (None, dec, check_decode_partial_kernel, dict(seqlens=[37, 5, 1, 0], H_q=8, H_kv=2, num_splits=3), False),
    (None, dec, check_decode_partial_kernel, dict(seqlens=[70, 9], H_q=4, H_kv=2, num_splits=1), False),
    ("08-whole-slice-one-tile", dec, check_decode_partial_kernel, dict(seqlens=[70], num_splits=1), True),
    ("08-atomic-per-head-reload", dec, check_decode_partial_kernel, dict(seqlens=[37], H_q=4, H_kv=1, num_splits=2), True),
    ("08-atomic-past-seqlen", dec, check_decode_partial_kernel, dict(seqlens=[40], num_splits=3), True),
    # GPU-sized: compiled, no ledger
    (None, bwd, check_flash_backward_kernels, dict(B=2, H=4, T=512, D=64, causal=True, block_m=64, block_n=32), False),
    ("07-dq-keyword-race", bwd, check_flash_backward_kernels, dict(B=2, H=4, T=512, D=64, causal=True), None),
    (None, t.flash_kernel, check_flash_kernel, dict(B=2, H=4, T=512, D=64, causal=True), False),
    (None, dec, check_decode_partial_kernel, dict(seqlens=[1000, 40], H_q=8, H_kv=2, D=64, T_max=1024, dtype=torch.float16), False),
]
bad = 0
for mid, get, check, case, should_fail in RUNS:
    t0 = time.time()
    try:
        check(get(mid), **case)
        got, msg = False, ""
    except AssertionError as exc:
        got, msg = True, str(exc)
    ok = should_fail is None or got == should_fail
    bad += not ok
    print(f"{'ok ' if ok else 'BAD'} {mid or 'reference'} {case} failed={got} {time.time() - t0:.1f}s {msg[:300]}", flush=True)
print("BAD:", bad)
