"""Where 05's grading time goes on a GPU: kernel compiles vs the rest (run 2026-12-01, see README).

python probe_cache.py  -- runs source 05's set-up, solution and test cells (hidden tests included,
no bench) as one script, with the caller's TRITON_CACHE_DIR; gcc calls are timed through CC=ccwrap."""
import json, runpy, time
nb = json.load(open("source/attention_kernels/05_triton_flash.ipynb"))
parts = ["import time as _t\n_t0 = _t.time()\n"]
for c in nb["cells"]:
    gid = c["metadata"].get("nbgrader", {}).get("grade_id", "")
    if c["cell_type"] != "code" or gid.startswith(("bench", "try", "bootstrap")):
        continue
    src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    parts.append("\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!"))))
    parts.append(f"print('  after {gid}: %.1f s' % (_t.time() - _t0), flush=True)\n")
open("/tmp/nb05.py", "w").write("\n".join(parts))  # a real file: @triton.jit reads the kernel's source
t = time.time()
runpy.run_path("/tmp/nb05.py", run_name="__main__")
print(f"total {time.time() - t:.1f} s", flush=True)
