"""On the H200: the reference kernels of 04, 05, 07 and 08 pass their checks rebuilt from source (compiled
launches under the no-torch probe, and the CPU-sized cases through the interpreted twin), and a kernel
that stores nothing plus a pre-run hook fails on both paths. Run from the repository root:
PYTHONPATH=src python3 notes/gpu/2026-12-02/kernel-source/check.py"""
import os
import re
import sys
import tempfile
import time
import traceback

from attnlab import init

RT = init()
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from attnlab import review  # noqa: E402
from attnlab.verify import check_flash_kernel, check_softmax_kernel  # noqa: E402
from attnlab.verify_backward import check_flash_backward_kernels  # noqa: E402
from attnlab.verify_decode import check_decode_merge_kernel, check_flash_decode  # noqa: E402

FLAGS = []
review.flag = FLAGS.append
print(RT.describe(), torch.__version__, triton.__version__, flush=True)


def cells(notebook, *ids, edit=None):
    src = open(f"notebooks/{notebook}.py").read()
    text = ""
    for gid in ids:
        start = src.index(f'# %% nbgrader={{"grade_id": "{gid}"')
        body = src[src.index("\n", start) + 1:src.index("\n# %%", start + 10)]
        text += re.sub(r"^\s*### (BEGIN|END) SOLUTION\n", "", body, flags=re.M) + "\n\n"
    if edit:
        text = edit(text)
    path = os.path.join(tempfile.mkdtemp(), f"{notebook}.py")
    open(path, "w").write(text)
    ns = {"triton": triton, "tl": tl, "torch": torch, "__name__": notebook}
    exec(compile(text, path, "exec"), ns)
    return ns


def case(name, fn, expect_pass=True):
    FLAGS.clear()
    t = time.time()
    try:
        fn()
        ok, why = True, ""
    except Exception as exc:  # noqa: BLE001
        ok, why = False, f"{type(exc).__name__}: {str(exc)[:300]}"
        if expect_pass:
            traceback.print_exc()
    verdict = "as expected" if ok == expect_pass else "UNEXPECTED"
    print(f"{verdict}: {name}: {'passed' if ok else 'failed'} in {time.time() - t:.1f}s {why}", flush=True)
    for f in FLAGS:
        print(f"    flag: {f[:300]}", flush=True)


k04 = cells("04_triton_softmax", "_softmax_kernel")["_softmax_kernel"]
case("04 reference, CPU-sized (interpreted twin)", lambda: check_softmax_kernel(k04, n_rows=4, n_cols=37))
case("04 reference, GPU float16", lambda: check_softmax_kernel(k04, n_rows=2048, n_cols=1000, dtype=torch.float16))
case("04 reference, GPU float32 large", lambda: check_softmax_kernel(k04, n_rows=4096, n_cols=1000, padded=True,
                                                                      device="cuda"))

STORE = re.compile(r"^    tl\.store\(output_ptr.*\n", re.M)
HOOK = """
def _hook(y, x, xs, ys, n_cols, **launch):
    y.copy_(torch.softmax(x.double(), dim=-1).to(y.dtype))


_softmax_kernel.add_pre_run_hook(_hook)
"""
h04 = cells("04_triton_softmax", "_softmax_kernel", edit=lambda t: STORE.sub("    pass\n", t) + HOOK)["_softmax_kernel"]
case("04 hook, CPU-sized", lambda: check_softmax_kernel(h04, n_rows=4, n_cols=37), expect_pass=False)
case("04 hook, GPU float16", lambda: check_softmax_kernel(h04, n_rows=2048, n_cols=1000, dtype=torch.float16),
     expect_pass=False)

k05 = cells("05_triton_flash", "_flash_fwd_kernel")["_flash_fwd_kernel"]
case("05 reference, CPU-sized", lambda: check_flash_kernel(k05, T=37, D=32, causal=True))
case("05 reference, GPU bf16", lambda: check_flash_kernel(k05, B=2, H=8, T=1024, D=64, causal=True,
                                                          dtype=torch.bfloat16, block_m=64, block_n=64))

ns07 = cells("07_triton_backward", "_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel")
K07 = (ns07["_bwd_preprocess_kernel"], ns07["_bwd_dkdv_kernel"], ns07["_bwd_dq_kernel"])
case("07 reference, CPU-sized", lambda: check_flash_backward_kernels(K07, T=37, D=32, causal=True))
case("07 reference, GPU bf16", lambda: check_flash_backward_kernels(K07, B=2, H=8, T=1024, D=64, causal=True,
                                                                    dtype=torch.bfloat16, block_m=64, block_n=64))

ns08 = cells("08_flash_decoding", "_decode_partial_kernel", "_decode_merge_kernel")
case("08 reference, CPU-sized", lambda: check_flash_decode(ns08["_decode_partial_kernel"],
                                                           ns08["_decode_merge_kernel"], seqlens=[37, 5, 1, 0],
                                                           H_q=8, H_kv=2, num_splits=3))
case("08 merge reference, GPU", lambda: check_decode_merge_kernel(ns08["_decode_merge_kernel"], num_splits=8,
                                                                  B=4, H=16, D=128, device="cuda"))
case("08 reference, GPU bf16", lambda: check_flash_decode(ns08["_decode_partial_kernel"],
                                                          ns08["_decode_merge_kernel"], seqlens=[4000, 1000],
                                                          H_q=8, H_kv=2, D=128, dtype=torch.bfloat16))
print("done", flush=True)

# launch overhead of the rebuilt kernel (the fast path of from_source, the watched run) on small launches
if torch.cuda.is_available():
    from attnlab import kernel_source, launch

    x = torch.randn(64, 1000, device="cuda")
    for label in ("rebuilt from source", "the learner's object (before)"):
        if label.startswith("the learner"):
            kernel_source.from_source = lambda k: k
        for _ in range(20):
            launch.launch_softmax(k04, x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(500):
            launch.launch_softmax(k04, x)
        torch.cuda.synchronize()
        print(f"launch_softmax, {label}: {(time.perf_counter() - t) / 500 * 1e6:.0f} us per launch", flush=True)
