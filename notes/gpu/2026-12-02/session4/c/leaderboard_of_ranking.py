"""The class leaderboard (`attnlab leaderboard`) for the ranked variants of benchmarks/timing_ranking.py:
each variant's outcome written as a student's speed-pass record into a scratch course folder, then the
command renders the HTML and CSV into OUT.

    PYTHONPATH=src python3 notes/gpu/2026-12-02/session4/c/leaderboard_of_ranking.py RANKING_JSON OUT
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(ROOT / "src"))

from attnlab.grading import cli  # noqa: E402
from attnlab.grading.course import assignment_of  # noqa: E402


def main(ranking: Path, out: Path) -> int:
    rows = [r for r in json.loads(ranking.read_text()) if r.get("run", 0) == 0]
    course = Path(tempfile.mkdtemp(prefix="attnlab-leaderboard-"))
    shutil.copy(ROOT / "nbgrader_config.py", course)
    (course / "notebooks").mkdir()
    names, assignments = [], set()
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    full = {"04": "04_triton_softmax", "05": "05_triton_flash", "07": "07_triton_backward", "08": "08_flash_decoding"}
    for r in rows:
        notebook = full[r["notebook"]]  # the ranking's rows name notebooks by number
        assignment = assignment_of(notebook)
        student = f"{r['notebook']}-{r['variant']}"
        record = {**r, "student": student, "assignment": assignment, "date": date, "notebook": notebook}
        path = course / "timings" / assignment / student / f"{notebook}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
        names.append(f"{student},{r['variant']}")
        assignments.add(assignment)
    (course / "leaderboard_names.csv").write_text("\n".join(names) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    for assignment in sorted(assignments):
        cli.main(["--course", str(course), "leaderboard", "--assignment", assignment, "--out", str(out),
                  "--no-feedback"])
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
