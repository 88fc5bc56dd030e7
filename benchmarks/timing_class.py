"""What the timing stage costs a class, and whether timing several students at once changes a ratio (issue 33).

Builds a class per assignment from the honest variants of ``benchmarks/timing_ranking.py`` (student i
gets variant i of each timed notebook, cycling; ``--refs`` more students submit the reference), then
times it as ``attnlab speed --jobs N`` does (:func:`attnlab.grading.host.speed.time_students`, sandboxed
when bubblewrap works): once one student at a time on the first ``--serial`` students, once ``--jobs``
at a time on the whole class. Prints the wall time per submission of each, where a worker's time went,
each variant's ratios in both runs (their spread) and the order of the variants by ratio. ``--hog S``
adds a run of the first assignment's class with another process keeping the GPU busy for its first S
seconds (what a process left behind in another worker's sandbox could do): the students timed beside it
must be found (their reference ran off the class's median) and timed again alone.

Run on a GPU host, from the repository root:
    python benchmarks/timing_class.py --students 12 --refs 4 --serial 3 --jobs 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from timing_ranking import SOURCES, VARIANTS, write_variant  # noqa: E402

from attnlab.grading import sandbox  # noqa: E402
from attnlab.grading.host import speed  # noqa: E402

CLASSES = {"attention_kernels": ("04", "05"), "attention_kernels_beyond": ("07", "08")}


def build_class(notebooks: tuple[str, ...], students: int, refs: int, folder: Path) -> dict[str, list[tuple]]:
    """student -> [(submitted, reference)], with the variant's name kept beside: {student: [(nb, variant, path)]}."""
    variants = {nb: [(name, write_variant(nb, name, cell, edit, folder / nb)) for name, cell, edit in VARIANTS[nb]]
                for nb in notebooks}
    klass = {}
    for i in range(students):
        klass[f"s{i:02d}"] = [(nb, *variants[nb][i % len(variants[nb])]) for nb in notebooks]
    for j in range(refs):
        klass[f"ref{j}"] = [(nb, *variants[nb][0]) for nb in notebooks]
    return klass


def run(klass: dict, jobs: int, boxed: bool) -> tuple[float, list[dict]]:
    work = {s: [(path, SOURCES[nb]) for nb, _, path in subs] for s, subs in klass.items()}
    t0 = time.perf_counter()
    rows, seen = [], set()
    for student, timings in speed.time_students(work, jobs=jobs, sandbox=boxed):
        again = student in seen  # timed again alone: this row replaces the first
        seen.add(student)
        for (nb, variant, _), t in zip(klass[student], timings):
            rows.append({"student": student, "nb": nb, "variant": variant, "again": again, **t.to_json()})
    return time.perf_counter() - t0, rows


_HOG = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=12)
    ap.add_argument("--refs", type=int, default=4)
    ap.add_argument("--serial", type=int, default=3, help="students timed one at a time (the baseline)")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--assignments", nargs="+", default=list(CLASSES))
    ap.add_argument("--out", type=Path, default=Path("/tmp/timing_class"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--hog", type=float, default=0.0, help="seconds of another process's matmuls in a third run")
    args = ap.parse_args()
    boxed = sandbox.check()[0]
    print(f"sandbox (bubblewrap) {'on' if boxed else 'OFF: not available here'}", flush=True)
    report = []
    for assignment in args.assignments:
        klass = build_class(CLASSES[assignment], args.students, args.refs, args.out / assignment)
        serial = dict(list(klass.items())[:args.serial])
        runs = [(1, serial, 0.0), (args.jobs, klass, 0.0)]
        if args.hog and assignment == args.assignments[0]:
            runs.append((args.jobs, klass, args.hog))
        for jobs, group, hog in runs:
            hogger = subprocess.Popen([sys.executable, "-c", _HOG, str(hog)]) if hog else None
            wall, rows = run(group, jobs, boxed)
            if hogger is not None:
                hogger.wait()
            report.append({"assignment": assignment, "jobs": jobs, "students": len(group), "wall_s": wall,
                           "hog_s": hog, "rows": rows})
            print(f"\n{assignment}: {len(group)} students at --jobs {jobs}"
                  + (f", another process on the GPU for its first {hog:g} s" if hog else "")
                  + f": {wall:.1f} s, {wall / len(group):.2f} s per submission", flush=True)
            for r in rows:
                print(f"  {r['student']:6s} {r['nb']} {r['variant']:26s} {r['status']:9s} ratio {r['ratio'] or 0:.3f} "
                      f"ref {r['reference_ms'] or 0:.4f} ms {r['rate'] or 0:8.1f} {r['unit']:8s} {r['phases']}"
                      + ("  AGAIN ALONE: " + r["message"] if r["again"] else ""), flush=True)
            print(f"  timed again alone: {sorted({r['student'] for r in rows if r['again']}) or 'nobody'}")
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
        for nb in CLASSES[assignment]:
            mine = [r for run_ in report if run_["assignment"] == assignment and not run_["hog_s"]
                    for r in run_["rows"] if r["nb"] == nb]
            by_variant: dict[str, list[float]] = {}
            for r in mine:
                if r["ratio"] and not any(o["again"] and (o["student"], o["nb"]) == (r["student"], r["nb"])
                                          for o in mine if o is not r):
                    by_variant.setdefault(r["variant"], []).append(r["ratio"])
            print(f"{assignment} {nb}: ratios by variant (the runs without another process):")
            for variant, ratios in sorted(by_variant.items(), key=lambda kv: -statistics.median(kv[1])):
                cv = statistics.pstdev(ratios) / statistics.mean(ratios) if len(ratios) > 1 else 0.0
                print(f"   {variant:26s} n={len(ratios):2d} median {statistics.median(ratios):.3f} "
                      f"min {min(ratios):.3f} max {max(ratios):.3f} CV {cv:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
