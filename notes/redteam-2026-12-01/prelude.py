ROOT='/work/main'
TMP='/tmp/atk'

import os
os.environ.pop("TRITON_INTERPRET", None)
os.environ.pop("ATTNLAB_DEVICE", None)
import importlib.util, sys, textwrap
import torch, triton
import triton.language as tl
from triton.runtime.jit import JITFunction
from attnlab import device, gpu_compile, launch, verify, verify_decode
# a GPU machine, as far as the checks can tell (no CUDA call is made for a CPU-sized case)
device._gpu_available = launch._gpu_available = lambda: True
fake = device.Runtime("cuda", False, "a simulated GPU")
device.runtime = verify.runtime = lambda: fake

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
