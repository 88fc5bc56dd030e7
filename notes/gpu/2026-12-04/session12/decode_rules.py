"""Issue 34 item 2: the split count from waves of resident programs (the launcher's new default) against
the rule of 2026-12-02 (waves of one program per SM), and split counts that fill 1/2, 1, 3/2 and 2 waves of
resident programs, from CUDA graphs. Notebook 08's 24 shapes at D=128, and B 1/8 x H_kv 8/32 at 32k keys
for D=64 and D=256 (other occupancies). Writes $OUT/decode_rules.csv.

    PYTHONPATH=src:. python3 notes/gpu/2026-12-04/session12/decode_rules.py
"""
import csv
import math
import os
import statistics

import torch

from attnlab import bench, bench_decode, launch_decode
from tests.test_launcher_strides import _dec


def rule_2026_12_02(pps, n_keys, n_sm, block_n=64, waves=4, min_keys=256, max_splits=128):
    """The launcher's rule before this session: near waves * n_sm programs, fullest last wave of n_sm."""
    cap = max(1, min(max_splits, n_keys // max(min_keys, block_n)))
    wanted = math.ceil(waves * n_sm / pps)
    low, high = max(1, math.ceil(wanted * 2 / 3)), min(cap, wanted * 3 // 2)
    if high < low:
        return max(1, min(wanted, cap))
    fill = lambda s: round(s * pps / (math.ceil(s * pps / n_sm) * n_sm), 2)  # noqa: E731
    return max(range(low, high + 1), key=lambda s: (fill(s), -abs(s - wanted)))


partial, merge = _dec()
sms = torch.cuda.get_device_properties(0).multi_processor_count
copy = bench.copy_bandwidth_gbs()
H_q, dtype = 32, torch.bfloat16
shapes = [(128, B, H, T) for B in (1, 8) for H in (8, 32) for T in (4096, 8192, 16384, 32768, 65536, 131072)]
shapes += [(D, B, H, 32768) for D in (64, 256) for B in (1, 8) for H in (8, 32)]
out = open(os.path.join(os.environ.get("OUT", "."), "decode_rules.csv"), "w", newline="")
w = csv.writer(out)
w.writerow(["D", "B", "H_kv", "T_k", "per_sm", "what", "splits", "programs", "graph_us", "x_sdpa", "x_copy"])
ratios = {"new": {}, "old": {}}
print(f"copy {copy:.0f} GB/s, {sms} SMs", flush=True)
for D, B, H_kv, T in shapes:
    nbytes = bench_decode.kv_bytes(B, H_kv, T, D, 2)
    sets = [bench_decode._random_cache(B, H_q, H_kv, T, D, dtype, seed=i) for i in range(bench_decode.rotation_sets(nbytes))]
    sdpa_us = bench_decode.graph_ms([bench_decode.sdpa_step(*s[:3])[0] for s in sets]) * 1e3
    per_sm = launch_decode.partial_programs_per_sm(partial, *sets[0], causal=True)
    if per_sm is None:
        print("the driver gave no occupancy: 4 assumed", flush=True)
        per_sm = launch_decode.PER_SM_DEFAULT
    pps = B * H_kv
    new = launch_decode.decode_config(sets[0][0], sets[0][1], per_sm=per_sm).num_splits
    old = rule_2026_12_02(pps, T, sms)
    cands = {"new": new, "old": old}
    for f in (0.5, 1, 1.5, 2):
        s = max(1, min(128, T // 64, round(f * sms * per_sm / pps)))
        cands.setdefault(f"{f} wave", s)
    line = f"D={D:<3} B={B} H_kv={H_kv:<2} T={T:<6} per_sm={per_sm} SDPA {sdpa_us:7.1f} us |"
    timed = {}
    for what, splits in cands.items():
        if splits not in timed:
            steps = [bench_decode.splitk_step(partial, merge, *s, num_splits=splits)[0] for s in sets]
            timed[splits] = bench_decode.graph_ms(steps) * 1e3
        us = timed[splits]
        gbs = nbytes / us / 1e3
        w.writerow([D, B, H_kv, T, per_sm, what, splits, splits * pps, f"{us:.2f}", f"{sdpa_us / us:.3f}", f"{gbs / copy:.3f}"])
        line += f" {what} {splits}:{sdpa_us / us:.2f}"
        if what in ratios:
            ratios[what][(D, B, H_kv, T)] = (sdpa_us / us, gbs / copy)
    out.flush()
    print(line, flush=True)
    del sets
    torch.cuda.empty_cache()
for what, r in ratios.items():
    d128 = [v[0] for k, v in r.items() if k[0] == 128]
    print(f"{what}: D=128 over notebook 08's 24 shapes: worst {min(d128):.3f} median {statistics.median(d128):.3f} "
          f"within 5% of SDPA at {sum(x >= 0.95 for x in d128)} of {len(d128)}; B=1 H_kv=8 32k "
          f"{r[(128, 1, 8, 32768)][1]:.3f} x copy; all shapes worst {min(v[0] for v in r.values()):.3f}")
