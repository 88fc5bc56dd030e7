"""Issue 33 on the H200: what the timing stage adds to grading, per submission. One submission of each
assignment (the instructor's notebooks as the learner's), timed as `attnlab speed` times a student:
"before": a worker per notebook, 30 repetitions (the stage until this change; measured for the second
assignment only); "after": one worker for all of the student's notebooks, timing.DEFAULT_REPS repetitions.
Sandboxed as in grading when bubblewrap works here. Prints the wall time per submission and where it went.

    PYTHONPATH=src python3 notes/gpu/2026-12-02/session4/c/cost.py [--json FILE] [--skip-before]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(ROOT / "src"))

from attnlab.grading import sandbox, timing  # noqa: E402

SUBMISSIONS = {
    "attention_kernels_beyond": ("07_triton_backward", "08_flash_decoding"),
    "attention_kernels": ("04_triton_softmax", "05_triton_flash"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip-before", action="store_true")
    args = ap.parse_args()
    boxed = sandbox.check()[0]
    print(f"sandbox (bubblewrap) {'on' if boxed else 'OFF: not available here'}", flush=True)
    rows = []
    for assignment, names in SUBMISSIONS.items():
        pairs = [(ROOT / "source" / assignment / f"{n}.ipynb",) * 2 for n in names]
        t0 = time.perf_counter()
        after = timing.time_notebooks(pairs, sandbox=boxed)
        wall = time.perf_counter() - t0
        rows.append({"assignment": assignment, "how": f"one worker, {timing.DEFAULT_REPS} reps", "wall_s": wall,
                     "notebooks": [t.to_json() for t in after]})
        print(f"{assignment}: after  {wall:6.1f} s  " + "; ".join(
            f"{t.notebook} {t.status.value} ratio {t.ratio or 0:.3f} cv {t.cv or 0:.2%} {t.phases}" for t in after),
            flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        if args.skip_before or assignment != "attention_kernels_beyond":
            continue  # "before" for one assignment: the comparison, within the script's time
        t0 = time.perf_counter()
        before = [timing.time_notebook(*pair, reps=30, sandbox=boxed) for pair in pairs]
        wall = time.perf_counter() - t0
        rows.append({"assignment": assignment, "how": "a worker per notebook, 30 reps", "wall_s": wall,
                     "notebooks": [t.to_json() for t in before]})
        print(f"{assignment}: before {wall:6.1f} s  " + "; ".join(
            f"{t.notebook} {t.status.value} ratio {t.ratio or 0:.3f} {t.phases}" for t in before), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
