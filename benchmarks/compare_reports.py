"""Compare `attnlab autograde --report-json` files of several runs of the same submissions.

    python benchmarks/compare_reports.py [--expected synthetic.txt] RUN.json ...

For each student graded in more than one run, every notebook's status, points, per-cell points
and reasons, notes and needs-review must be identical to the first run that graded it (times
aside); with --expected (what `attnlab synthetic-class` printed), each total must match the
expectation printed there (abuse cases, marked *, only reported). Prints one line per run and
every difference; exits 1 if any.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from attnlab.grading.host.autograde import read_report_json  # noqa: E402


def comparable(r) -> dict:
    d = asdict(r)
    d.pop("seconds")
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--expected", type=Path)
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    expected = {}
    if args.expected and args.expected.exists():
        for m in re.finditer(r"^\s+(synthetic-\S+)\s+(\S+)/(\S+?)(\*?)\s", args.expected.read_text(), re.M):
            expected[m.group(1)] = (m.group(2), m.group(4) == "*")
    first: dict[tuple[str, str], tuple[str, dict]] = {}
    problems = []
    for run in args.runs:
        results = read_report_json(run)
        totals: dict[str, float] = {}
        for r in results:
            totals[r.student] = totals.get(r.student, 0) + r.points
            key = (r.student, r.notebook)
            if key in first and first[key][1] != comparable(r):
                problems.append(f"{run.name}: {r.student}/{r.notebook} differs from {first[key][0]}")
            first.setdefault(key, (run.name, comparable(r)))
        off = [f"{s}={t:g} (expected {expected[s][0]})" for s, t in totals.items()
               if s in expected and expected[s][0] != "?" and float(expected[s][0]) != t]
        hard = [o for o in off if not expected[o.split("=")[0]][1]]
        problems += [f"{run.name}: total {o}" for o in hard]
        soft = [o for o in off if expected[o.split("=")[0]][1]]
        print(f"{run.name}: {len(totals)} students, {len(results)} notebooks, "
              f"{sum(r.status != 'graded' for r in results)} not graded, {len(hard)} totals off expectation"
              + (f", abuse totals off (short limits not used): {soft}" if soft else ""))
    print("\n".join(problems) if problems else "identical grades wherever runs overlap; totals as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
