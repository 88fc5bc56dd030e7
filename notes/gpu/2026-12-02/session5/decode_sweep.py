"""Issue 34 item 2: which launch options bring notebook 08's split-K kernels (the reference solution) to
SDPA's time and to copy bandwidth, replayed from a CUDA graph. Writes $OUT/decode_sweep.csv (every point)
and prints, per shape, SDPA, the launcher's defaults and the best configuration. Stops adding points
after BUDGET_S seconds.

    python3 notes/gpu/2026-12-02/session5/decode_sweep.py   (PYTHONPATH=src:. and $OUT set)
"""
import csv
import itertools
import math
import os
import time

import torch

from attnlab import bench, bench_decode, launch_decode
from tests.test_launcher_strides import _dec

BUDGET_S = float(os.environ.get("BUDGET_S", "420"))
t0 = time.monotonic()
partial, merge = _dec()
copy = bench.copy_bandwidth_gbs()
sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"copy bandwidth {copy:.0f} GB/s (read + write), {sms} SMs", flush=True)
H_q, D, dtype = 32, 128, torch.bfloat16
shapes = [(1, 8, 32768), (1, 8, 131072), (1, 32, 32768), (8, 8, 32768)]
rows = []
out = open(os.path.join(os.environ.get("OUT", "."), "decode_sweep.csv"), "w", newline="")
w = csv.writer(out)
w.writerow(["B", "H_kv", "T_k", "impl", "block_n", "warps", "stages", "waves", "splits", "graph_us", "graph_gbs",
            "x_copy", "x_sdpa", "status"])
for B, H_kv, T in shapes:
    n_sets = bench_decode.rotation_sets(bench_decode.kv_bytes(B, H_kv, T, D, 2))
    sets = [bench_decode._random_cache(B, H_q, H_kv, T, D, dtype, seed=i) for i in range(n_sets)]
    nbytes = bench_decode.kv_bytes(B, H_kv, T, D, 2)
    sd = [bench_decode.sdpa_step(*s[:3])[0] for s in sets]
    sdpa_us = bench_decode.graph_ms(sd) * 1e3
    w.writerow([B, H_kv, T, "SDPA", "", "", "", "", "", f"{sdpa_us:.2f}", f"{nbytes / sdpa_us / 1e3:.0f}",
                f"{nbytes / sdpa_us / 1e3 / copy:.3f}", "1.000", "ok"])
    print(f"\nB={B} H_kv={H_kv} T={T}: SDPA {sdpa_us:.1f} us = {nbytes / sdpa_us / 1e3 / copy:.2f} x copy", flush=True)
    results = []
    for block_n, warps, stages, waves in itertools.product((32, 64, 128), (2, 4, 8), (2, 3, 4), (None, 2, 8, 16)):
        if time.monotonic() - t0 > BUDGET_S:
            break
        cfg0 = launch_decode.decode_config(sets[0][0], sets[0][1], None, block_n)
        splits = None if waves is None else max(1, min(128, T // max(256, block_n),
                                                        math.ceil(waves * sms / (B * H_kv * cfg0.row_blocks))))
        try:
            steps = [bench_decode.splitk_step(partial, merge, *s, num_splits=splits, block_n=block_n,
                                              num_warps=warps, num_stages=stages)[0] for s in sets]
            us = bench_decode.graph_ms(steps) * 1e3
            status = "ok"
        except Exception as exc:  # noqa: BLE001
            us, status = float("nan"), f"{type(exc).__name__}"
        n_splits = launch_decode.decode_config(sets[0][0], sets[0][1], splits, block_n).num_splits
        gbs = nbytes / us / 1e3
        w.writerow([B, H_kv, T, "split-K", block_n, warps, stages, waves or "default", n_splits, f"{us:.2f}",
                    f"{gbs:.0f}", f"{gbs / copy:.3f}", f"{sdpa_us / us:.3f}", status])
        out.flush()
        results.append((us, block_n, warps, stages, waves, n_splits))
    ok = [r for r in results if r[0] == r[0]]
    default = [r for r in ok if (r[1], r[2], r[3], r[4]) == (64, 4, 3, None)]
    for label, r in [("default", default[0] if default else None), ("best", min(ok) if ok else None)]:
        if r:
            print(f"  {label}: {r[0]:.1f} us = {nbytes / r[0] / 1e3 / copy:.2f} x copy, {sdpa_us / r[0]:.2f} x SDPA's speed "
                  f"(block_n={r[1]} warps={r[2]} stages={r[3]} waves={r[4]} splits={r[5]})", flush=True)
    del sets
    torch.cuda.empty_cache()
print(f"\n{time.monotonic() - t0:.0f} s")
