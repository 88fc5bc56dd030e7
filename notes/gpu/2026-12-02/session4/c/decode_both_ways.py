"""Issue 34, item 1 on the H200: one decoding step (B=1, H_q=32, H_kv=8, 32k keys, D=128, bf16) by the
course's reference kernels through the given launcher ``flash_decode``, called from Python and replayed
from a CUDA graph, against SDPA both ways. "before": the launcher as it behaved until this change
(``launch.checking()``: NaN-filled outputs and a read of the lengths on the host, a GPU sync each call);
"after": its fast path. Each figure: median of --reps calls, CUDA events around one call, the L2 cache
flushed before each (a 256 MB write), the GPU idle when the call starts (so the host's work counts):
:func:`attnlab.bench_decode.step_both_ways`, what notebook 08 runs.

    PYTHONPATH=src python3 notes/gpu/2026-12-02/session4/c/decode_both_ways.py [--reps 100] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(ROOT / "src"))

from attnlab import bench_decode, device, launch, launch_decode  # noqa: E402
from attnlab.grading import timing  # noqa: E402

B, H_Q, H_KV, T, D = 1, 32, 8, 32768, 128


def reference_kernels():
    """The instructor notebook's two decode kernels, loaded the way the timing stage loads them."""
    nb = ROOT / "source/attention_kernels_beyond/08_flash_decoding.ipynb"
    cells = ("_decode_partial_kernel", "_decode_merge_kernel")
    src = timing.kernel_source(timing.cells_of(nb, cells))
    path = Path(tempfile.mkdtemp(), "decode_kernels.py")
    path.write_text(src.text)
    spec = importlib.util.spec_from_file_location("decode_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tuple(getattr(mod, c) for c in cells)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    device.init(verbose=False)
    partial, merge = reference_kernels()

    def flash_decode(q, k, v, lens):
        return launch_decode.launch_flash_decode(partial, merge, q, k, v, lens)

    def flash_decode_checking(q, k, v, lens):
        with launch.checking():
            return flash_decode(q, k, v, lens)

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; B={B} H_q={H_Q} H_kv={H_KV} T={T} D={D} bf16; "
          f"median of {args.reps} calls, each on an idle GPU after an L2 flush")
    result = {}
    for when, fn in (("before (the launcher as it was: checking mode)", flash_decode_checking),
                     ("after (fast path)", flash_decode)):
        rows = bench_decode.step_both_ways(fn, B=B, H_q=H_Q, H_kv=H_KV, T_k=T, D=D, reps=args.reps)
        result[when] = rows
        print(f"-- {when}\n{bench_decode.format_both_ways(rows)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
