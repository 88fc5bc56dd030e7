"""Issue 34 item 2, third step: a split count that fills whole waves of SMs (tail-aware) against the plain
rule (8 waves, 256 keys, num_stages=2) over notebook 08's grid, from CUDA graphs. $OUT/decode_splits_tail.csv."""
import csv
import math
import os
import statistics

import torch

from attnlab import bench_decode, launch_decode
from tests.test_launcher_strides import _dec


def tail_aware(pps, n_keys, n_sm, waves, lo=0.67, hi=1.5, block_n=64, min_keys=256, max_splits=128):
    """The split count near waves * n_sm programs whose last wave is fullest (ties: nearest to it)."""
    cap = max(1, min(max_splits, n_keys // max(min_keys, block_n)))
    wanted = math.ceil(waves * n_sm / max(1, pps))
    cands = range(max(1, math.ceil(wanted * lo)), max(1, min(cap, math.floor(wanted * hi))) + 1)

    def fill(s):
        p = s * pps
        return p / (math.ceil(p / n_sm) * n_sm)
    return max(cands, key=lambda s: (round(fill(s), 2), -abs(s - wanted))) if cands else min(wanted, cap)


partial, merge = _dec()
sms = torch.cuda.get_device_properties(0).multi_processor_count
H_q, D, dtype = 32, 128, torch.bfloat16
RULES = {"plain w8": lambda p, t: launch_decode.choose_num_splits(p, t, sms, block_n=64, waves=8),
         "tail w4": lambda p, t: tail_aware(p, t, sms, 4), "tail w6": lambda p, t: tail_aware(p, t, sms, 6),
         "tail w8": lambda p, t: tail_aware(p, t, sms, 8)}
out = open(os.path.join(os.environ.get("OUT", "."), "decode_splits_tail.csv"), "w", newline="")
w = csv.writer(out)
w.writerow(["B", "H_kv", "T_k", "rule", "splits", "graph_us", "x_sdpa"])
ratios = {r: [] for r in RULES}
for B in (1, 8):
    for H_kv in (8, 32):
        for T in (4096, 8192, 16384, 32768, 65536, 131072):
            nbytes = bench_decode.kv_bytes(B, H_kv, T, D, 2)
            sets = [bench_decode._random_cache(B, H_q, H_kv, T, D, dtype, seed=i)
                    for i in range(bench_decode.rotation_sets(nbytes))]
            sdpa_us = bench_decode.graph_ms([bench_decode.sdpa_step(*s[:3])[0] for s in sets]) * 1e3
            line = f"B={B} H_kv={H_kv:<2} T={T:<6} SDPA {sdpa_us:7.1f} us |"
            for name, rule in RULES.items():
                splits = rule(B * H_kv, T)
                steps = [bench_decode.splitk_step(partial, merge, *s, num_splits=splits, block_n=64, num_warps=4,
                                                  num_stages=2)[0] for s in sets]
                us = bench_decode.graph_ms(steps) * 1e3
                ratios[name].append(sdpa_us / us)
                w.writerow([B, H_kv, T, name, splits, f"{us:.2f}", f"{sdpa_us / us:.3f}"])
                line += f" {name}: {splits:>3} {sdpa_us / us:.2f}"
            out.flush()
            print(line, flush=True)
            del sets
            torch.cuda.empty_cache()
for r, v in ratios.items():
    print(f"  {r}: worst {min(v):.3f}  median {statistics.median(v):.3f}")
