"""Red-team check of 2026-12-01 (notes/decisions.md): launch a softmax kernel module's CPU-sized cases on a
simulated GPU machine, as tests/test_gpu_host_cases.py does, without or with the grader's guard installed.

    cd /tmp/atk && cp /work/main/notes/redteam-2026-12-01/evil5.py . && \
    /work/main/.venv/bin/python /work/main/notes/redteam-2026-12-01/t1.py evil5 [--guard]
"""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TMP = os.getcwd()  # where the attack module is
sys.path[:0] = [ROOT, TMP]
from tests.test_gpu_host_cases import PRELUDE  # noqa: E402  (the simulated GPU machine of the tests)

exec(PRELUDE)
gpu_compile._native_target = lambda: None  # noqa: F821 (from PRELUDE)
if "--guard" in sys.argv:  # as autograding installs it
    from attnlab.grading import guard
    print(guard.install()[:80])
import importlib  # noqa: E402

mod = importlib.import_module(sys.argv[1])
from attnlab.verify import check_softmax_kernel  # noqa: E402

for n_rows, n_cols in ((3, 37), (5, 300), (4096, 4096)):
    try:
        check_softmax_kernel(mod._softmax_kernel, n_rows=n_rows, n_cols=n_cols)
        print(n_rows, n_cols, "PASSED")
    except Exception as e:  # noqa: BLE001
        print(n_rows, n_cols, type(e).__name__, str(e)[:300])
print("check fn now:", verify.check_softmax_kernel)  # noqa: F821
try:
    compiled_mode_intact()  # noqa: F821
    print("triton intact")
except AssertionError as e:
    print("triton NOT intact", e)
