"""The ``attnlab`` command line: build the course, grade submissions, check yourself.

    attnlab build [--check]        notebooks/ -> source/ -> release/ (or only report staleness)
    attnlab samples                write the bundled sample submissions into submitted/
    attnlab grade-samples          the main job: build, samples, autograde, grades.csv
    attnlab selfcheck NB.ipynb     grade your own notebook with the hidden tests (self-study)
    attnlab doctor                 check this environment (GPU or interpreter, versions, lab extension)

Grading learners' submissions (README, "Instructor: grading submissions"):

    attnlab collect EXPORT.zip     an LMS export -> submitted/<student>/ (nbgrader zip_collect)
    attnlab autograde [options]    grade submitted/ one notebook at a time, print the report
    attnlab export [--to CSV]      the gradebook as a CSV (nbgrader export)
    attnlab feedback [--student S] feedback/<student>/attention_kernels/*.html (nbgrader generate_feedback)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .course import Course


def _cmd_build(args) -> int:
    from .build import build, stale_files

    course = Course.find(args.course)
    if args.check:
        problems = stale_files(course)
        if problems:
            print("source/ or release/ is stale against notebooks/; run `attnlab build`:")
            print("\n".join(f"  {p}" for p in problems))
            return 1
        print("source/ and release/ match notebooks/")
        return 0
    start = time.perf_counter()
    build(course)
    print(f"built {len(course.notebook_names())} notebooks into {course.source.relative_to(course.root)} "
          f"and {course.release.relative_to(course.root)} in {time.perf_counter() - start:.1f} s")
    return 0


def _cmd_samples(args) -> int:
    from .samples import write_main_samples

    course = Course.find(args.course)
    students = write_main_samples(course)
    print(f"wrote sample submissions to {course.submitted.relative_to(course.root)}/: {', '.join(students)}")
    return 0


def _grade_and_report(course: Course, students, notebooks, export: Path | None, report_csv: Path | None,
                      report_json: Path | None = None, allow_unsafe: bool = False):
    from .autograde import autograde, export_grades, format_report, write_report_csv, write_report_json

    start = time.perf_counter()
    print("Autograding, one notebook at a time:")
    results = autograde(course, students, notebooks, allow_unsafe=allow_unsafe)
    elapsed = time.perf_counter() - start
    print()
    print(format_report(results))
    print()
    n_sub = len({r.student for r in results})
    print(f"graded {len(results)} notebooks of {n_sub} submissions in {elapsed:.0f} s "
          f"({elapsed / max(n_sub, 1):.0f} s per submission)")
    if report_csv:
        write_report_csv(results, report_csv)
        print(f"per-notebook report: {report_csv}")
    if report_json:
        write_report_json(results, report_json)
        print(f"per-notebook report (JSON): {report_json}")
    if export:
        export_grades(course, export)
        print(f"gradebook exported by nbgrader: {export}")
    return results


def _registered(course: Course) -> bool:
    """Whether gradebook.db knows the assignment (autograde needs its notebooks and test cells)."""
    from .course import ASSIGNMENT, COURSE_ID

    db = course.root / "gradebook.db"
    if not db.exists():
        return False
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{db}", COURSE_ID) as gb:
        try:
            return bool(gb.find_assignment(ASSIGNMENT).notebooks)
        except MissingEntry:
            return False


def _cmd_autograde(args) -> int:
    course = Course.find(args.course)
    if not _registered(course):
        print("attnlab autograde: gradebook.db does not know the assignment yet; run once:\n"
              "  nbgrader generate_assignment attention_kernels --force")
        return 1
    from .autograde import not_graded
    from .sandbox import SandboxUnavailable

    try:
        results = _grade_and_report(course, args.student or None, args.notebook or None, args.export,
                                    args.report_csv, args.report_json, args.unsafe_no_sandbox)
    except SandboxUnavailable as exc:
        print(f"attnlab autograde: {exc}")
        return 2
    if args.feedback:
        _feedback(course, args.student or None)
    return 1 if not_graded(results) else 0  # a notebook that could not be graded is never silent


def _cmd_collect(args) -> int:
    from .collect import collect_zip
    from .submissions import WHOLE

    course = Course.find(args.course)
    try:
        notes = collect_zip(course, args.archive, layout=args.layout, regexp=args.regexp)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"attnlab collect: {exc}")
        return 1
    print(f"collected {len(notes)} submissions into {course.submitted.relative_to(course.root)}/: "
          f"{', '.join(notes) or '(none: check --layout or --regexp)'}")
    names = course.notebook_names()
    for student, by_nb in notes.items():
        folder = course.submitted / student / "attention_kernels"
        missing = [n for n in names if not (folder / f"{n}.ipynb").exists()]
        for key, lines in by_nb.items():
            for line in lines:
                print(f"  {student}{'' if key == WHOLE else ' / ' + key}: {line}")
        if missing:
            print(f"  {student}: not submitted: {', '.join(missing)}")
    return 0 if notes else 1


def _cmd_export(args) -> int:
    from .autograde import export_grades

    course = Course.find(args.course)
    export_grades(course, args.to)
    print(f"gradebook exported by nbgrader: {args.to}")
    return 0


def _feedback(course: Course, students) -> int:
    from .autograde import generate_feedback

    start = time.perf_counter()
    files = generate_feedback(course, students)
    for s, paths in files.items():
        print(f"  {s:<24} {len(paths)} feedback files" if paths else f"  {s:<24} NO FEEDBACK (see nbgrader's log)")
    print(f"feedback for {sum(bool(p) for p in files.values())} of {len(files)} students in "
          f"{(course.root / 'feedback').relative_to(course.root)}/ ({time.perf_counter() - start:.0f} s)")
    return 0 if all(files.values()) else 1


def _cmd_feedback(args) -> int:
    return _feedback(Course.find(args.course), args.student or None)


def _cmd_grade_samples(args) -> int:
    from .build import build, generate_assignment
    from .samples import SAMPLE_STUDENTS, forget_students, write_main_samples

    course = Course.find(args.course)
    start = time.perf_counter()
    build(course)
    # Earlier sample grades would stop nbgrader from registering changed notebooks: drop them first.
    forget_students(course, SAMPLE_STUDENTS)
    generate_assignment(course)
    print(f"built release/ from notebooks/ and registered it in the gradebook in {time.perf_counter() - start:.1f} s")
    students = write_main_samples(course)
    print(f"sample submissions: {', '.join(students)}\n")
    from .sandbox import SandboxUnavailable

    try:
        results = _grade_and_report(course, students, None, course.root / "grades.csv",
                                    course.root / "grading_report.csv", allow_unsafe=args.unsafe_no_sandbox)
    except SandboxUnavailable as exc:
        print(f"attnlab grade-samples: {exc}")
        return 2
    ref = [r for r in results if r.student == "reference"]
    blank = [r for r in results if r.student == "blank"]
    problems = [f"reference lost points in {r.notebook}" for r in ref if r.points < r.max_points]
    problems += [f"blank earned points in {r.notebook}" for r in blank if r.points > 0]
    if problems:
        print("\nSANITY CHECK FAILED: " + "; ".join(problems))
        return 1
    print("\nsanity check: reference has full marks, blank has zero")
    return 0


UNSAFE_HELP = ("grade even where bubblewrap is missing, WITHOUT the sandbox: learner code then runs with your "
               "rights and can read or rewrite gradebook.db and other submissions, change later grades, "
               "leave processes behind and kill the grader")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnlab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default=None, help="course directory (default: found from the cwd)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="notebooks/ -> source/ -> release/")
    p.add_argument("--check", action="store_true", help="only report whether source/ and release/ are stale")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("samples", help="write the bundled sample submissions into submitted/")
    p.set_defaults(func=_cmd_samples)

    p = sub.add_parser("autograde", help="autograde submitted/, one notebook at a time")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--notebook", action="append", help="grade only this notebook (repeatable)")
    p.add_argument("--export", type=Path, default=None, help="also export the gradebook to this CSV")
    p.add_argument("--report-csv", type=Path, default=None, help="write per-notebook results here")
    p.add_argument("--report-json", type=Path, default=None, help="write every result, cell and note here")
    p.add_argument("--feedback", action="store_true", help="then generate the feedback HTML")
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=UNSAFE_HELP)
    p.set_defaults(func=_cmd_autograde)

    p = sub.add_parser("collect", help="collect an LMS zip export into submitted/ (nbgrader zip_collect)")
    p.add_argument("archive", type=Path, help="the zip file downloaded from the LMS")
    p.add_argument("--layout", choices=["auto", "canvas", "moodle", "folders"], default="auto",
                   help="how the export names each student's files (default: recognise it)")
    p.add_argument("--regexp", default=None,
                   help="nbgrader's named_regexp instead (groups student_id and file_id, matched on the path)")
    p.set_defaults(func=_cmd_collect)

    p = sub.add_parser("export", help="export the gradebook to a CSV (nbgrader export)")
    p.add_argument("--to", type=Path, default=Path("grades.csv"), help="the CSV to write (default grades.csv)")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("feedback", help="feedback HTML per student (nbgrader generate_feedback)")
    p.add_argument("--student", action="append", help="only this student (repeatable)")
    p.set_defaults(func=_cmd_feedback)

    p = sub.add_parser("grade-samples", help="the main job: build, write samples, autograde, export grades.csv")
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=UNSAFE_HELP)
    p.set_defaults(func=_cmd_grade_samples)

    from .. import doctor, selfcheck  # the learner's commands live in their own modules

    selfcheck.add_parser(sub)
    doctor.add_parser(sub)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
