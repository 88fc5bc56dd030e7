"""Which num_warps should the softmax launcher give each BLOCK_SIZE? (GPU; figures in notes/)

    python benchmarks/softmax_warps.py SOURCE_DIR

Times the reference ``_softmax_kernel`` of notebook 04 on 1 GiB of float32 per n_cols, for every
num_warps, with the launcher's grid (one program per row). Prints GB/s (read + write).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton

from attnlab import bench
from attnlab.nbload import load_notebook_module


def main(argv):
    kernel = load_notebook_module(Path(argv[0]) / "04_triton_softmax.ipynb", required=("_softmax_kernel",),
                                  cells=("bootstrap", "setup", "_softmax_kernel"))._softmax_kernel
    print(f"copy: {bench.copy_bandwidth_gbs():.0f} GB/s")
    for n_cols in (1000, 1024, 2048, 4096, 8192):
        n_rows = (1 << 28) // n_cols
        x = torch.randn(n_rows, n_cols, device="cuda")
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        moved = 2 * x.numel() * 4
        cells = [f"torch {bench.gb_per_s(moved, bench.median_ms(lambda: torch.softmax(x, -1))):5.0f}"]
        for w in (1, 2, 4, 8, 16, 32):
            def run():
                kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=block, num_warps=w)
            try:
                cells.append(f"w{w} {bench.gb_per_s(moved, bench.median_ms(run)):5.0f}")
            except Exception as exc:
                cells.append(f"w{w} {type(exc).__name__}")
        print(f"n_cols {n_cols:5d}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
