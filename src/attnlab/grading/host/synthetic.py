"""A synthetic class: N made-up submissions, to try a grading set-up before the real deadline.

``attnlab synthetic-class N`` writes ``submitted/synthetic-NNN-<kind>/<assignment>/`` for N
students, taking turns over five kinds (round-robin, each kind cycling through its own list, so
names and contents depend on N and the course only):

- ``reference``: the model solutions (:func:`attnlab.grading.samples.reference_notebook`);
- ``mistake-<id>``: one typical mistake of ``samples/mistakes/`` (:func:`attnlab.grading.samples.apply_mistake`),
  the other notebooks correct;
- ``variant-<id>``: one correct variant (a "mistake" that fails no test) the same way;
- ``abuse-<id>``: one case of ``samples/abuse/cases.py`` (:func:`attnlab.grading.abuse.build_submission`) whose
  notebooks are all in the assignment, with the reference for the notebooks the case leaves alone;
- ``blank``: the release as handed out.

Each comes with its expected autograded total, so staff can compare the report with what it should
say. The abuse cases' expectations were written for the test suite's short limits
(:data:`SHORT_LIMITS`); with the course's own limits a case that is merely slow may keep points.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass

import nbformat

from ..abuse import Abuse, build_submission, load_cases, write_folder
from ..course import Course, assignment_of
from ..samples import Mistake, apply_mistake, load_mistakes, reference_notebook, release_notebook, write_submission

#: The kinds, in the order students take turns over them.
KINDS = ("reference", "mistake", "variant", "abuse", "blank")
#: The limits the abuse cases' expectations assume (the test suite's; read by nbgrader_config.py
#: and attnlab.verify).
SHORT_LIMITS = {"ATTNLAB_CALL_LIMIT_S": "2", "ATTNLAB_CELL_TIMEOUT_S": "6", "ATTNLAB_NOTEBOOK_BUDGET_S": "150"}


@dataclass(frozen=True)
class Synthetic:
    """One synthetic submission: student id, kind, what it is, and the autograded points it should get."""

    student: str
    kind: str
    why: str
    expected: float | None  # None: not known (an abuse case without an expectation for a notebook)
    max_points: float


def _auto_points(course: Course, name: str) -> dict[str, float]:
    from .autograde import notebook_points

    return notebook_points(course, name)[0]


def _abuse_expected(case: Abuse, points: dict[str, dict[str, float]]) -> float | None:
    total = sum(sum(p.values()) for p in points.values())
    for name in case.notebooks:
        if name not in case.expect:
            return None
    for name, exp in case.expect.items():
        total -= sum(points[name].values()) if exp.status == "missing" else sum(points[name][g] for g in exp.lost)
    return total


def plan_class(course: Course, n: int, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, object]]:
    """The first ``n`` (kind, item) pairs: kinds take turns; each cycles through its own items
    (a Mistake, an Abuse, or None for reference and blank).

    Raises:
        ValueError: ``n`` < 1, an unknown kind, or no kind with anything to offer.
    """
    if n < 1:
        raise ValueError(f"a synthetic class needs at least 1 student, got {n}")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
    names = set(course.notebook_names())
    mistakes = [m for m in load_mistakes(course)[0] if assignment_of(m.notebook) == course.assignment]
    pools: dict[str, list] = {
        "reference": [None], "blank": [None],
        "mistake": [m for m in mistakes if m.fails], "variant": [m for m in mistakes if not m.fails],
        "abuse": [c for c in load_cases(course) if set(c.notebooks) | set(c.expect) <= names],
    }
    order = [k for k in kinds if pools[k]]
    if not order:
        raise ValueError("none of the kinds asked for has a submission in this course")
    taken = dict.fromkeys(order, 0)
    out = []
    for i in range(n):
        kind = order[i % len(order)]
        out.append((kind, pools[kind][taken[kind] % len(pools[kind])]))
        taken[kind] += 1
    return out


def write_class(course: Course, n: int, kinds: tuple[str, ...] = KINDS) -> list[Synthetic]:
    """Write ``n`` synthetic submissions of ``course.assignment`` into submitted/ (replacing earlier
    ones of the same name); what was written, with the expected totals."""
    names = course.notebook_names()
    points = {name: _auto_points(course, name) for name in names}
    full = sum(sum(p.values()) for p in points.values())
    reference = {name: reference_notebook(course, name) for name in names}
    written = []
    for i, (kind, item) in enumerate(plan_class(course, n, kinds), start=1):
        label = kind if item is None else f"{kind}-{item.id}"
        student = f"synthetic-{i:03d}-{label}"
        if kind == "reference":
            write_submission(course, student, reference)
            why, expected = "the model solutions", full
        elif kind == "blank":
            write_submission(course, student, {name: release_notebook(course, name) for name in names})
            why, expected = "the release as handed out", 0.0
        elif kind in ("mistake", "variant"):
            m: Mistake = item
            write_submission(course, student, {**reference, m.notebook: apply_mistake(reference[m.notebook], m)})
            why, expected = m.why, full - sum(points[m.notebook][g] for g in m.fails)
        else:
            case: Abuse = item
            folder = course.submitted / student / course.assignment
            if folder.exists():
                shutil.rmtree(folder)
            write_folder(folder, build_submission(course, case))
            # the notebooks the case neither holds nor expects anything of: the reference
            untouched = [name for name in names if name not in case.notebooks and name not in case.expect]
            write_folder(folder, {f"{name}.ipynb": nbformat.writes(reference[name]).encode() for name in untouched})
            why, expected = case.why, _abuse_expected(case, points)
        written.append(Synthetic(student, kind, why, expected, full))
    return written


def format_class(course: Course, written: list[Synthetic]) -> str:
    """What :func:`write_class` wrote, one student a line with the expected total, and how to grade it."""
    width = max(len(s.student) for s in written)
    lines = [f"wrote {len(written)} synthetic submissions of {course.assignment} into "
             f"{course.submitted.relative_to(course.root)}/ (expected autograded totals):"]
    for s in written:
        exp = "?" if s.expected is None else f"{s.expected:g}"
        lines.append(f"  {s.student:<{width}}  {exp:>3}/{s.max_points:g}{'*' if s.kind == 'abuse' else ' '} {s.why}")
    counts = {k: sum(s.kind == k for s in written) for k in KINDS}
    lines.append("kinds: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v))
    if counts["abuse"]:
        lines.append("* abuse cases: expected with the test suite's short limits ("
                     + " ".join(f"{k}={v}" for k, v in SHORT_LIMITS.items())
                     + "); with the course's limits a merely slow case may keep points")
    lines.append(f"grade them: attnlab autograde --assignment {course.assignment} --jobs N "
                 f"(every submission in submitted/; --student S for some)")
    return "\n".join(lines)


def _cmd(args) -> int:
    course = Course.find(args.course, args.assignment)
    start = time.perf_counter()
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    try:
        written = write_class(course, args.n, kinds)
    except ValueError as exc:
        print(f"attnlab synthetic-class: {exc}")
        return 2
    print(format_class(course, written))
    print(f"in {time.perf_counter() - start:.1f} s")
    return 0


def add_parser(sub, parents=()) -> None:
    """Register ``attnlab synthetic-class`` on the CLI's subparsers."""
    from .options import assignment_option, plain_text

    p = sub.add_parser("synthetic-class", help="write N synthetic submissions into submitted/, with expected totals",
                       description=plain_text(__doc__), parents=list(parents),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("n", type=int, metavar="N", help="how many submissions")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help=f"comma-separated kinds to take turns over (default {','.join(KINDS)})")
    assignment_option(p)
    p.set_defaults(func=_cmd)
