"""Where the CPU time of autograding one submission goes: nbgrader, kernel start, each cell.

    python benchmarks/profile_grading.py COURSE STUDENT [--prewarm] [--no-guard] [--cprofile OUT.txt] [--json OUT.json]

COURSE is a course folder with a gradebook and ``submitted/STUDENT/`` (e.g. made by ``attnlab
synthetic-class``). Grades the student's notebooks one at a time in this process, as
``attnlab.grading.worker.jobs`` does, with the course's Execute step subclassed to take readings (the
grading itself is unchanged). For each notebook it prints wall seconds and CPU seconds (user + sys)
of

- ``nbgrader``: this process outside the kernel's run (gradebook reads and writes, the sanitising
  and other preprocessors, reading and writing notebooks);
- ``client``: this process while the kernel runs (nbclient's messaging, output handling);
- ``kernel start``: the sandboxed kernel's process tree from its start until its first cell
  (bwrap, Python, ipykernel, the guard's install; with ``--prewarm`` the spare kernel's start,
  which the previous notebook paid for, is counted here when it is taken);
- every code cell: the kernel's process tree (the guard's calls around read-only cells included).

CPU of the kernel is read from /proc (utime + stime of every process under the kernel's bwrap,
threads included), so it is exact per process and needs no root. Without ``--prewarm`` every
kernel starts cold, which separates its cost from the notebook before it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import time
from pathlib import Path

from attnlab.grading.sandbox import proctree
from attnlab.grading.worker.execute import GradingExecute

READINGS: list[dict] = []


def tree_cpu(pid: int | None) -> float:
    """CPU seconds (user + sys, reaped children included) of ``pid`` and every process under it."""
    return proctree.cpu_seconds(pid) or 0.0


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class ProfiledExecute(GradingExecute):
    """GradingExecute that records the kernel's CPU before and after every cell."""

    def preprocess(self, nb, resources=None, km=None):
        self._reading = {"cells": [], "t0": time.perf_counter(), "self0": self_cpu()}
        try:
            return super().preprocess(nb, resources, km)
        finally:
            r = self._reading
            r["execute_wall"] = time.perf_counter() - r.pop("t0")
            r["client_cpu"] = self_cpu() - r.pop("self0")
            READINGS.append(r)

    def _run_cell(self, cell, resources, index, guarded):
        pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
        r = self._reading
        before, t0 = tree_cpu(pid), time.perf_counter()
        if "start_cpu" not in r:
            r["start_cpu"], r["start_wall"] = before, t0 - r["t0"]
        super()._run_cell(cell, resources, index, guarded)
        meta = cell.metadata.get("nbgrader", {})
        r["cells"].append({"index": index, "id": meta.get("grade_id") or f"cell{index}",
                           "test": bool(meta.get("grade")) and not meta.get("solution"),
                           "cpu": tree_cpu(pid) - before, "wall": time.perf_counter() - t0})
        r["last_cpu"] = tree_cpu(pid)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("course", type=Path)
    ap.add_argument("student")
    ap.add_argument("--prewarm", action="store_true")
    ap.add_argument("--cprofile", type=Path, help="write the nbgrader side's cProfile (CPU time) here")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-guard", action="store_true", help="without the integrity guard (to measure its cost)")
    args = ap.parse_args(argv)
    root = args.course.resolve()
    os.chdir(root)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from attnlab.grading.course import Course, assignment_of, tool_env

    os.environ.update(tool_env())
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    pre = list(config.Autograde.autograde_preprocessors)
    pre[pre.index("attnlab.grading.worker.execute.GradingExecute")] = "profile_grading.ProfiledExecute"
    config.Autograde.autograde_preprocessors = pre
    config.ProfiledExecute.prewarm = args.prewarm
    if args.no_guard:
        config.ProfiledExecute.guard = False
    import profile_grading  # the module nbgrader loads by name (this file may run as __main__)

    readings = profile_grading.READINGS
    prof = cProfile.Profile(time.process_time) if args.cprofile else None
    rows = []
    for name in Course(root).notebook_names():
        coursedir = CourseDirectory(config=config, root=str(root))
        coursedir.notebook_id = name
        api = NbGraderAPI(coursedir=coursedir, config=config)
        t0, c0 = time.perf_counter(), self_cpu()
        if prof:
            prof.enable()
        result = api.autograde(assignment_of(name), args.student, force=True, create=True)
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, self_cpu() - c0
        assert result["success"], result.get("error")
        r = readings[-1]
        cells_cpu = sum(c["cpu"] for c in r["cells"])
        rows.append({"notebook": name, "wall": wall, "worker_cpu": cpu, "nbgrader_cpu": cpu - r["client_cpu"],
                     "nbgrader_wall": wall - r["execute_wall"], **r, "cells_cpu": cells_cpu})
    for row in rows:
        print(f"\n{row['notebook']}: wall {row['wall']:.2f} s; nbgrader {row['nbgrader_wall']:.2f} s wall "
              f"{row['nbgrader_cpu']:.2f} s CPU; client {row['client_cpu']:.2f} s CPU; kernel start "
              f"{row['start_wall']:.2f} s wall {row['start_cpu']:.2f} s CPU; cells {row['cells_cpu']:.2f} s CPU")
        for c in row["cells"]:
            if c["cpu"] >= 0.05 or c["test"]:
                print(f"    {'test' if c['test'] else '    '} {c['id']:<45} {c['cpu']:6.2f} s CPU {c['wall']:6.2f} s wall")
    tot = {k: sum(r[k] for r in rows) for k in ("wall", "nbgrader_cpu", "client_cpu", "start_cpu", "cells_cpu")}
    tests = sum(c["cpu"] for r in rows for c in r["cells"] if c["test"])
    print(f"\nsubmission: wall {tot['wall']:.1f} s; CPU: nbgrader {tot['nbgrader_cpu']:.1f}, client "
          f"{tot['client_cpu']:.1f}, kernel start {tot['start_cpu']:.1f}, cells {tot['cells_cpu']:.1f} "
          f"(test cells {tests:.1f}); total {sum(v for k, v in tot.items() if k != 'wall'):.1f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if prof:
        with open(args.cprofile, "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
