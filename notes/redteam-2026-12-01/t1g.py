exec(open('/tmp/atk/prelude.py').read())
sys.path.insert(0,'/tmp/atk')
import importlib, traceback
gpu_compile._native_target = lambda: None
from attnlab.grading import guard; print(guard.install()[:80]); mod = importlib.import_module(sys.argv[1])
k=mod._softmax_kernel
from attnlab.verify import check_softmax_kernel as chk
for nr,nc in ((3,37),(5,300),(4096,4096)):
    try:
        chk(k, n_rows=nr, n_cols=nc)
        print(nr,nc,"PASSED")
    except Exception as e: print(nr,nc, type(e).__name__, str(e)[:300])
print("check fn now:", verify.check_softmax_kernel)
try: compiled_mode_intact(); print("triton intact")
except AssertionError as e: print("triton NOT intact", e)
