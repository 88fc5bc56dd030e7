"""Does a cell that spins after starting CUDA count as 'on the CPU all along'? (It must not.)"""
import tempfile, pathlib, sys
sys.path.insert(0, ".")
from tests.test_hardening import _execute, _SPIN
from attnlab.checks import RAN_ALL_ALONG
cuda_spin = "import torch\nx = torch.ones(1, device='cuda') * 2\ntorch.cuda.synchronize()\n" + _SPIN
nb = _execute([(_SPIN, False), (cuda_spin, False)], pathlib.Path(tempfile.mkdtemp()), timeout=4)
cells = [c for c in nb.cells if c.cell_type == "code"]
for label, c in zip(("cpu spin", "cuda spin"), cells):
    share = next((o.text.strip() for o in c.outputs if o.output_type == "stream"), "")
    print(label, share, "| flagged busy:", RAN_ALL_ALONG in c.outputs[-1].evalue)
print(nb.metadata["attnlab"]["notes"])
