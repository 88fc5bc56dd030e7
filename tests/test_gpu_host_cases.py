"""CPU-sized cases on a GPU machine: they run through Triton's interpreter, exactly as on a laptop.

A GPU machine grades a Triton notebook's CPU-sized cases (float32, small) on the CPU through the
interpreter, with the load accounting, in the same process that compiles the GPU-sized cases for
the GPU (attnlab.verify.kernel_device, attnlab.core.device.interpreted_twin). No GPU here: each test runs
a script in a fresh Python whose Triton is in compiled mode and whose attnlab believes it has a GPU
(the launch of a CPU case never touches it), then compiles the same kernel for sm_90 afterwards to
show that Triton was left as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = textwrap.dedent('''
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.pop("ATTNLAB_DEVICE", None)
    import importlib.util, sys, textwrap
    import torch, triton
    import triton.language as tl
    from triton.runtime.jit import JITFunction
    from attnlab import checks, gpu_compile, launch, verify, verify_decode
    from attnlab.core import device
    # a GPU machine, as far as the checks can tell (no CUDA call is made for a CPU-sized case)
    device._gpu_available = launch._gpu_available = lambda: True
    fake = device.Runtime("cuda", False, "a simulated GPU")
    device.runtime = verify.runtime = checks.runtime = lambda: fake

    def model_kernel(notebook, name, edit=None):
        text = open(os.path.join(ROOT, "notebooks", notebook + ".py")).read()
        start = text.index("@triton.jit\\ndef " + name + "(")
        body = text[start:text.index("### END SOLUTION", start)].replace("    ### BEGIN SOLUTION\\n", "")
        if edit:
            body = body.replace(*edit)
        path = os.path.join(TMP, name + ".py")
        open(path, "w").write("import triton\\nimport triton.language as tl\\n\\n\\n" + textwrap.dedent(body))
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return getattr(mod, name)

    from triton.runtime.interpreter import InterpretedFunction
    START = (os.environ.get("TRITON_INTERPRET"), "interpret" in vars(triton.knobs.runtime),
             sorted(vars(tl.core.tensor)))

    def compiled_mode_intact():
        """Triton as this process imported it: no interpreted function or interpreter patch left anywhere."""
        assert not triton.knobs.runtime.interpret
        assert (os.environ.get("TRITON_INTERPRET"), "interpret" in vars(triton.knobs.runtime),
                sorted(vars(tl.core.tensor))) == START
        left = [f"{name}.{k}" for name, mod in list(sys.modules.items()) if name.split(".")[0] == "triton"
                for k, v in list(vars(mod).items()) if isinstance(v, InterpretedFunction)]
        assert not left, left
''')


def _run(tmp_path: Path, body: str) -> str:
    script = f"ROOT = {str(ROOT)!r}\nTMP = {str(tmp_path)!r}\n" + PRELUDE + textwrap.dedent(body)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ATTNLAB_DEVICE")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_cpu_sized_flash_cases_are_interpreted_and_accounted_then_triton_compiles_again(tmp_path):
    out = _run(tmp_path, '''
        kernel = model_kernel("05_triton_flash", "_flash_fwd_kernel")
        assert type(kernel) is JITFunction
        assert verify.kernel_device(None, dtype=torch.float32, elements=37 * 37) == ("cpu", True)
        assert verify.kernel_device(None, dtype=torch.bfloat16, elements=16)[0] == "cuda"
        assert verify.kernel_device(None, dtype=torch.float32, elements=2 * 4 * 512 * 512)[0] == "cuda"
        for causal in (False, True):
            verify.check_flash_kernel(kernel, T=37, D=32, causal=causal, block_m=16, block_n=32, seed=11)
        verify.check_flash_kernel(kernel, T=64, D=16, causal=True, block_m=32, block_n=16, growing=True)
        compiled_mode_intact()
        assert type(kernel) is JITFunction
        # the same kernel then compiles for a GPU through Triton's compiler, in the same process
        q = torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)
        args = (q, q, q, torch.empty_like(q), torch.empty(1, 2, 64), 64 * 64, 64, 64, 0.125)
        gpu_compile.ensure_compiles(kernel, args, dict(CAUSAL=True, BLOCK_M=64, BLOCK_N=64, HEAD_DIM=64),
                                    what="_flash_fwd_kernel", num_warps=4, num_stages=2, native=False)
        verify.check_flash_kernel(kernel, T=33, D=16, causal=False, block_m=16, block_n=16, seed=13)
        compiled_mode_intact()
        print("ok")
    ''')
    assert out.strip().endswith("ok")


def test_the_learners_module_and_helpers_are_given_back_unchanged(tmp_path):
    out = _run(tmp_path, '''
        path = os.path.join(TMP, "with_helper.py")
        open(path, "w").write(textwrap.dedent(\'\'\'
            import triton
            import triton.language as tl


            @triton.jit
            def _stable(x):
                return x - tl.max(x, axis=0)


            @triton.jit
            def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                                BLOCK_SIZE: tl.constexpr):
                row = tl.program_id(0).to(tl.int64)
                cols = tl.arange(0, BLOCK_SIZE)
                x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
                num = tl.exp(_stable(x.to(tl.float32)))
                tl.store(output_ptr + row * output_row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)
        \'\'\'))
        spec = importlib.util.spec_from_file_location("with_helper", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        kernel, helper = mod._softmax_kernel, mod._stable
        verify.check_softmax_kernel(kernel, n_rows=3, n_cols=37)
        assert mod._softmax_kernel is kernel and mod._stable is helper and type(helper) is JITFunction
        compiled_mode_intact()
        x = torch.randn(4, 1000)
        gpu_compile.ensure_compiles(kernel, (torch.empty_like(x), x, 1000, 1000, 1000), {"BLOCK_SIZE": 1024},
                                    what="_softmax_kernel", native=False)
        verify.check_softmax_kernel(kernel, n_rows=5, n_cols=300, seed=1)
        compiled_mode_intact()
        print("ok")
    ''')
    assert out.strip().endswith("ok")


def test_a_method_mistake_fails_on_a_gpu_machine_as_on_a_laptop(tmp_path):
    # each row read twice: right numbers, wrong method, which only the load accounting sees
    out = _run(tmp_path, '''
        kernel = model_kernel("04_triton_softmax", "_softmax_kernel")
        for n_cols in (37, 300, 5000):
            verify.check_softmax_kernel(kernel, n_rows=3, n_cols=n_cols, seed=n_cols)
        compiled_mode_intact()
        again = "x = tl.load(input_ptr + row * input_row_stride + cols, mask=in_row, other=float('-inf'))"
        twice = model_kernel("04_triton_softmax", "_softmax_kernel",
                             edit=("    x = x.to(tl.float32)", "    " + again + "\\n    x = x.to(tl.float32)"))
        try:
            verify.check_softmax_kernel(twice, n_rows=3, n_cols=37)
        except AssertionError as exc:
            print("method failure:", str(exc).splitlines()[0])
        else:
            raise SystemExit("a row read twice passed on the simulated GPU machine")
        compiled_mode_intact()
    ''')
    assert "method failure:" in out and "read column 0 of its row 2 times" in out, out


def test_a_gpu_case_is_not_run_on_the_cpu(tmp_path):
    out = _run(tmp_path, '''
        kernel = model_kernel("05_triton_flash", "_flash_fwd_kernel")
        if torch.cuda.is_available():  # a real GPU: the case compiles and passes there (the interpreter refuses bf16)
            verify.check_flash_kernel(kernel, T=64, D=32, dtype=torch.bfloat16)
            print("ran on the real GPU: CUDA")
        else:
            try:  # bfloat16 is a GPU case: it goes to the (simulated, so missing) GPU, never to the interpreter
                verify.check_flash_kernel(kernel, T=64, D=32, dtype=torch.bfloat16)
            except Exception as exc:
                print("went to the GPU:", exc)
            else:
                raise SystemExit("a bfloat16 case ran without a GPU")
    ''')
    assert "CUDA" in out, out


def test_the_interpreter_works_with_numpy_2_4_on_tritons_before_the_upstream_fix(tmp_path):
    # Triton 3.6 (the H200 host's) converts with int(data); NumPy >= 2.4 refuses a 1-element array there
    out = _run(tmp_path, '''
        import numpy as np
        from triton.runtime import interpreter as ti
        assert tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 4), np.__version__
        upstream = ti._patch_lang_tensor

        # Triton 3.6's function, from Triton's own file: the checks refuse Triton code a notebook replaced
        exec(compile("def as_in_triton_3_6(tensor, scope):\\n"
                     "    upstream(tensor, scope)\\n"
                     "    scope.set_attr(tensor, '__index__', lambda self: int(self.handle.data))\\n",
                     ti.__file__, "exec"))

        ti._patch_lang_tensor = as_in_triton_3_6
        kernel = model_kernel("05_triton_flash", "_flash_fwd_kernel")
        verify.check_flash_kernel(kernel, T=37, D=16, causal=True, block_m=16, block_n=16)
        compiled_mode_intact()
        print("ok")
    ''')
    assert out.strip().endswith("ok")
