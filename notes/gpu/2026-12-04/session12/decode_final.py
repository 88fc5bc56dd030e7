"""Issue 34 item 2, the final figures: notebook 08's grid through bench_decode.decode_sweep with the
launcher's defaults (split-K with the occupancy-aware split count, notebook 05's kernel, SDPA; from Python
and from CUDA graphs), flash_decode itself both ways at the issue's shape, and D = 256 / 512. Writes
$OUT/decode_final.csv and $OUT/decode_h200.png (the plot notebook 08 shows without a GPU).

    PYTHONPATH=src:. python3 notes/gpu/2026-12-04/session12/decode_final.py
"""
import os

import torch

from attnlab import bench, bench_decode, launch_decode
from attnlab.reference_decode import decode_attention_reference
from tests.test_bug_hints import solution
from tests.test_launcher_strides import _dec

OUT = os.environ.get("OUT", ".")
partial, merge = _dec()
fwd05 = solution("05_triton_flash", "_flash_fwd_kernel")
copy = bench.copy_bandwidth_gbs()
points = bench_decode.decode_sweep(partial, merge, fwd05, log=lambda *a: None)
bench_decode.write_csv(points, os.path.join(OUT, "decode_final.csv"))
print(bench_decode.format_table(points, copy_gbs=copy))
bench_decode.plot_decode(points, copy, title=f"one decoding step on {torch.cuda.get_device_name()}, bf16",
                         path=os.path.join(OUT, "decode_h200.png"))
sk = {(p.B, p.H_kv, p.T_k): p for p in points if p.impl == "split-K"}
sd = {(p.B, p.H_kv, p.T_k): p for p in points if p.impl.startswith("SDPA")}
r = {k: sd[k].graph_ms / sk[k].graph_ms for k in sk}
v = sorted(r.values())
print(f"split-K / SDPA speed from graphs: worst {v[0]:.3f}, median {v[len(v) // 2]:.3f}, best {v[-1]:.3f} (n={len(v)}); "
      f"within 5% at {sum(x >= 0.95 for x in v)}; below: " + ", ".join(f"B={k[0]} H_kv={k[1]} T={k[2]}: {x:.3f}"
                                                                      for k, x in sorted(r.items()) if x < 0.95))
print(f"B=1 H_kv=8 32k from a graph: {sk[1, 8, 32768].graph_gbs / copy:.3f} x copy ({copy:.0f} GB/s), "
      f"SDPA {sd[1, 8, 32768].graph_gbs / copy:.3f} x copy")


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
