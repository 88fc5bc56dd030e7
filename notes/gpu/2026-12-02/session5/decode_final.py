"""Issue 34 item 2 with the new defaults (num_stages=2, the tail-aware split count): notebook 08's grid
through bench_decode.decode_sweep (split-K and SDPA, from Python and from CUDA graphs), the launcher
flash_decode itself both ways at the issue's shape, and D = 256 / 512 with the defaults.
Writes $OUT/decode_final.csv and prints the table."""
import os

import torch

from attnlab import bench, bench_decode, launch_decode
from attnlab.reference_decode import decode_attention_reference
from tests.test_launcher_strides import _dec

partial, merge = _dec()
copy = bench.copy_bandwidth_gbs()
points = bench_decode.decode_sweep(partial, merge, log=lambda *a: None)
bench_decode.write_csv(points, os.path.join(os.environ.get("OUT", "."), "decode_final.csv"))
print(bench_decode.format_table(points, copy_gbs=copy))
sk = {(p.B, p.H_kv, p.T_k): p for p in points if p.impl == "split-K"}
sd = {(p.B, p.H_kv, p.T_k): p for p in points if p.impl.startswith("SDPA")}
r = sorted(sd[k].graph_ms / sk[k].graph_ms for k in sk)
print(f"split-K / SDPA speed from graphs: worst {r[0]:.3f}, median {r[len(r) // 2]:.3f}, best {r[-1]:.3f} (n={len(r)})")
print(f"B=1 H_kv=8 32k from a graph: {sk[1, 8, 32768].graph_gbs / copy:.3f} x copy ({copy:.0f} GB/s)")


def flash_decode(q, k, v, lens, causal=True, num_splits=None):
    return launch_decode.launch_flash_decode(partial, merge, q, k, v, lens, causal, num_splits)


print(bench_decode.format_both_ways(bench_decode.step_both_ways(flash_decode)))
for D in (256, 512):
    q = torch.randn(1, 8, 1, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 4096, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([3000], dtype=torch.int32, device="cuda")
    try:
        o, _ = flash_decode(q, k, v, lens)
        ref = decode_attention_reference(q.double(), k.double(), v.double(), lens, causal=True)[0]
        print(f"D={D} defaults: runs, max err {float((o.double() - ref).abs().max()):.1e}")
    except ValueError as exc:
        print(f"D={D} defaults: {exc}")
