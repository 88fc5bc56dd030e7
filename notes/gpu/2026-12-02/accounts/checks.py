"""Device checks for the kernel accounts and the interpreter change (2026-12-02); run from the staged tree.

1. Triton's interpreter on this host: each language module patched once per launch after attnlab's change
   (tests/test_support_package.py::test_interpreter_patches_the_language_once_per_launch, as a script).
2. A sandboxed Python as the kernel account of a root grader: its uid, CUDA, a Triton kernel compiled
   for the GPU and run, and whether /etc/shadow can be read.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

here = tempfile.mkdtemp()
os.chmod(here, 0o755)  # the kernel account reads the probe's module from it
open(os.path.join(here, "rowmax.py"), "w").write(textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def rowmax_kernel(X, Y, N_TILES: tl.constexpr, BLOCK: tl.constexpr):
        best = tl.full((), float("-inf"), tl.float32)
        total = tl.zeros((), tl.float32)
        for t in range(N_TILES):
            x = tl.load(X + t * BLOCK + tl.arange(0, BLOCK))
            best = tl.maximum(best, tl.max(x, 0))
            total += tl.sum(x, 0)
        tl.store(Y, best)
        tl.store(Y + 1, total)
'''))
interp = textwrap.dedent(f'''
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, {here!r})
    import torch
    from triton.runtime import interpreter as ti
    from rowmax import rowmax_kernel
    calls = [0]
    real = ti._patch_builtin
    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)
    ti._patch_builtin = counted
    def patches(kernel, tiles):
        x = torch.randn(tiles * 16)
        y = torch.empty(2)
        calls[0] = 0
        kernel[(1,)](x, y, N_TILES=tiles, BLOCK=16)
        assert torch.allclose(y, torch.stack([x.max(), x.sum()]), atol=1e-5)
        return calls[0]
    before = patches(rowmax_kernel, 1), patches(rowmax_kernel, 6)
    from attnlab.device import runnable_kernel
    kernel = runnable_kernel(rowmax_kernel)
    print("interpreter patches per launch (1 tile, 6 tiles): Triton alone", before,
          "with attnlab", (patches(kernel, 1), patches(kernel, 6)))
''')
proc = subprocess.run([sys.executable, "-c", interp], capture_output=True, text=True)
print(proc.stdout.strip(), proc.stderr[-2000:] if proc.returncode else "")

from attnlab.grading import sandbox, tasks  # noqa: E402

print("sandbox.check():", sandbox.check())
print("tasks.describe():", tasks.describe())
probe = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, os.environ["PROBE_DIR"])
    out = {"uid": os.getuid()}
    try:
        open("/etc/shadow").read()
        out["shadow"] = "READ"
    except OSError as exc:
        out["shadow"] = type(exc).__name__
    import torch
    out["cuda"] = torch.cuda.is_available()
    a = torch.randn(256, 256, device="cuda")
    out["matmul"] = float((a @ a).sum().item()) == float((a @ a).sum().item())
    from rowmax import rowmax_kernel
    x = torch.randn(96, device="cuda")
    y = torch.empty(2, device="cuda")
    rowmax_kernel[(1,)](x, y, N_TILES=6, BLOCK=16)
    out["triton_on_gpu"] = bool(torch.allclose(y, torch.stack([x.max(), x.sum()]), atol=1e-4))
    print(json.dumps(out))
''')
scratch = tempfile.mkdtemp()
cmd = sandbox.wrap([sys.executable, "-c", probe], scratch, ipc_dir=None, read_only=[here])
env = dict(os.environ, PROBE_DIR=here)
proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
print("sandboxed GPU probe:", proc.returncode, proc.stdout.strip(), proc.stderr[-1500:])
