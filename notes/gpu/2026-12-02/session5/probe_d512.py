"""What flash_decode does at D=512 on this GPU (runs, or the ValueError), and with block_n=32 / num_stages=2."""
import torch
from attnlab import launch_decode
from attnlab.reference_decode import decode_attention_reference
from tests.test_launcher_strides import _dec

partial, merge = _dec()
for D, kw in [(256, {}), (512, {}), (512, {"block_n": 32}), (512, {"num_stages": 2}), (512, {"block_n": 32, "num_stages": 2})]:
    q = torch.randn(1, 8, 1, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 4096, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([3000], dtype=torch.int32, device="cuda")
    try:
        o, _ = launch_decode.launch_flash_decode(partial, merge, q, k, v, lens, causal=True, **kw)
        ref = decode_attention_reference(q.double(), k.double(), v.double(), lens, causal=True)[0]
        print(D, kw, "runs, max err", float((o.double() - ref).abs().max()))
    except ValueError as exc:
        print(D, kw, "ValueError:", exc)
