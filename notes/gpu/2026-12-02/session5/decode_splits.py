"""Issue 34 item 2, second step: with num_stages=2 (decode_sweep.py's finding), which split-count rule
(choose_num_splits' waves and min_keys_per_split) keeps notebook 08's split-K kernels closest to SDPA over
notebook 08's whole grid (B 1/8, H_kv 8/32, T 4k..128k; H_q=32, D=128, bf16), replayed from CUDA graphs.
Writes $OUT/decode_splits.csv and prints each rule's worst and median ratio to SDPA's speed.
"""
import csv
import os
import statistics
import time

import torch

from attnlab import bench, bench_decode, launch_decode
from tests.test_launcher_strides import _dec

partial, merge = _dec()
t0 = time.monotonic()
copy = bench.copy_bandwidth_gbs()
sms = torch.cuda.get_device_properties(0).multi_processor_count
RULES = [(4, 256, 3), (4, 256, 2), (6, 256, 2), (8, 256, 2), (8, 512, 2), (6, 512, 2)]  # waves, min keys, stages
H_q, D, dtype = 32, 128, torch.bfloat16
out = open(os.path.join(os.environ.get("OUT", "."), "decode_splits.csv"), "w", newline="")
w = csv.writer(out)
w.writerow(["B", "H_kv", "T_k", "impl", "waves", "min_keys", "stages", "splits", "graph_us", "x_copy", "x_sdpa"])
ratios = {r: [] for r in RULES}
for B in (1, 8):
    for H_kv in (8, 32):
        for T in (4096, 8192, 16384, 32768, 65536, 131072):
            nbytes = bench_decode.kv_bytes(B, H_kv, T, D, 2)
            n_sets = bench_decode.rotation_sets(nbytes)
            sets = [bench_decode._random_cache(B, H_q, H_kv, T, D, dtype, seed=i) for i in range(n_sets)]
            sdpa_us = bench_decode.graph_ms([bench_decode.sdpa_step(*s[:3])[0] for s in sets]) * 1e3
            w.writerow([B, H_kv, T, "SDPA", "", "", "", "", f"{sdpa_us:.2f}", f"{nbytes / sdpa_us / 1e3 / copy:.3f}", "1"])
            line = f"B={B} H_kv={H_kv:<2} T={T:<6} SDPA {sdpa_us:7.1f} us |"
            for waves, min_keys, stages in RULES:
                rows = launch_decode.decode_config(sets[0][0], sets[0][1], None, 64).row_blocks
                splits = launch_decode.choose_num_splits(B * H_kv * rows, T, sms, block_n=64, waves=waves,
                                                         min_keys_per_split=min_keys)
                steps = [bench_decode.splitk_step(partial, merge, *s, num_splits=splits, block_n=64, num_warps=4,
                                                  num_stages=stages)[0] for s in sets]
                us = bench_decode.graph_ms(steps) * 1e3
                ratios[(waves, min_keys, stages)].append(sdpa_us / us)
                w.writerow([B, H_kv, T, "split-K", waves, min_keys, stages, splits, f"{us:.2f}",
                            f"{nbytes / us / 1e3 / copy:.3f}", f"{sdpa_us / us:.3f}"])
                line += f" {sdpa_us / us:.2f}"
            out.flush()
            print(line, flush=True)
            del sets
            torch.cuda.empty_cache()
print(f"copy {copy:.0f} GB/s; rules (waves, min_keys, stages): worst / median ratio to SDPA's speed")
for r, v in ratios.items():
    print(f"  {r}: worst {min(v):.3f}  median {statistics.median(v):.3f}  (n={len(v)})")
print(f"{time.monotonic() - t0:.0f} s")
