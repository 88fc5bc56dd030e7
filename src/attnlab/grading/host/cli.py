"""The attnlab command line: build the course, grade submissions, check yourself.

Learners:
    attnlab lab [FOLDER]           your own copy of the notebooks, opened in JupyterLab
    attnlab selfcheck NB.ipynb     grade your own notebook with the hidden tests (self-study)
    attnlab doctor                 check this environment (GPU or interpreter, versions, lab extension)

Instructors (run in the course repository, or name it with --course):
    attnlab build [--check]        notebooks/ -> source/ -> release/, both assignments (or only report staleness)
    attnlab samples                write the bundled sample submissions into submitted/
    attnlab grade-samples          the main job: build, samples, autograde both assignments, grades.csv
    attnlab synthetic-class N      N made-up submissions in submitted/, with their expected totals

Grading learners' submissions (docs/grading.md in the course repository):
    attnlab collect EXPORT.zip     an LMS export -> submitted/<student>/ (nbgrader zip_collect)
    attnlab autograde [options]    grade submitted/ (--jobs N workers side by side), print the report
                                   (--shard I/N: one shard of the class, for several machines)
    attnlab report                 merge the shards' reports into the class report
    attnlab export [--to CSV]      the gradebook as a CSV (nbgrader export); --canvas/--moodle FILE: the
                                   LMS's import file, keyed by the ids `attnlab collect` read
    attnlab feedback [--student S] feedback/<student>/<assignment>/*.html (nbgrader generate_feedback)
    attnlab speed                  time the submitted kernels on this GPU against the reference (after autograde)
    attnlab leaderboard            the class's speed leaderboard (HTML, CSV) and each student's standing
"""
# Length: One job: the grader's commands and their help texts, read together.

from __future__ import annotations

import argparse
import textwrap
import time
from pathlib import Path

from ..worker import gradebook
from . import shards
from ..course import ASSIGNMENT, ASSIGNMENTS, Course
from .options import assignment_option, plain_text


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
    for each in course.assignments():
        print(f"built {len(each.notebook_names())} notebooks into {each.source.relative_to(each.root)} "
              f"and {each.release.relative_to(each.root)}")
    print(f"in {time.perf_counter() - start:.1f} s")
    return 0


def _cmd_samples(args) -> int:
    from ..samples import write_main_samples

    course = Course.find(args.course)
    for each in course.assignments():
        students = write_main_samples(each)
        print(f"wrote sample submissions of {each.assignment} to {each.submitted.relative_to(each.root)}/: "
              f"{', '.join(students)}")
    return 0


def _shown(path: Path) -> str:
    """``path`` as printed: relative to the working folder when inside it (grades.csv, not /home/...)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _grade_and_report(course: Course, students, notebooks, export: Path | None, report_csv: Path | None,
                      report_json: Path | None = None, allow_unsafe: bool = False, jobs: int | None = 1):
    from .autograde import autograde, export_grades, format_report, write_report_csv, write_report_json
    from .parallel import plan

    from .bytecode import compile_kernel_imports, compile_package

    start = time.perf_counter()
    compile_package()  # every kernel imports the package in a sandbox that writes no byte code
    since = time.perf_counter()
    compiled = compile_kernel_imports()
    if compiled:
        print(f"Byte-compiled {', '.join(compiled)} (installed without byte code, which every sandboxed "
              f"kernel would otherwise compile again): {time.perf_counter() - since:.0f} s")
    workers = plan(jobs)
    if workers.note:
        print(workers.note)
    print(f"Autograding, one notebook at a time per worker: {workers.describe()}")
    results = autograde(course, students, notebooks, allow_unsafe=allow_unsafe, workers=workers)
    elapsed = time.perf_counter() - start
    print()
    print(format_report(results))
    print()
    n_sub = len({r.student for r in results})
    print(f"graded {len(results)} notebooks of {n_sub} submissions in {elapsed:.0f} s "
          f"({elapsed / max(n_sub, 1):.0f} s per submission)")
    if report_csv:
        write_report_csv(results, report_csv)
        print(f"per-notebook report: {_shown(report_csv)}")
    if report_json:
        write_report_json(results, report_json)
        print(f"per-notebook report (JSON): {_shown(report_json)}")
    if export:
        try:
            export_grades(course, export)
            print(f"gradebook exported by nbgrader: {_shown(export)}")
        except RuntimeError as exc:  # the grades are in the gradebook: `attnlab export` writes the CSV later
            print(f"NOT EXPORTED: {exc}; run `attnlab export --to {export}` once the gradebook is back")
    return results


def _registered(course: Course) -> bool:
    """Whether the gradebook knows the assignment (autograde needs its notebooks and test cells);
    says why not."""
    from sqlalchemy.exc import SQLAlchemyError

    from ..worker.gradebook import db_url, redact, registered

    try:
        if registered(course):
            return True
    except SQLAlchemyError as exc:
        print(f"attnlab autograde: cannot open the gradebook {redact(db_url(course))}: "
              f"{str(exc).splitlines()[0]}")
        return False
    print(f"attnlab autograde: the gradebook ({redact(db_url(course))}) does not know the assignment yet; "
          f"run once (before any shard starts):\n  nbgrader generate_assignment {course.assignment} --force")
    return False


def _shard_plan(course: Course, args) -> list[str] | None:
    """The students this run grades (--student, --students, --shard; None: everyone submitted), and
    the shard's own report files as defaults; prints the shard's students."""
    from ..worker.gradebook import db_url, is_sqlite
    from .shards import clear_report, parse_shard, report_name, students_to_grade

    students = students_to_grade(course, args.shard, args.students, args.student)
    if args.shard is not None:
        i, n = parse_shard(args.shard)
        args.report_csv = args.report_csv or course.root / report_name(i, n, ".csv")
        args.report_json = args.report_json or course.root / report_name(i, n, ".json")
        clear_report(args.report_csv, args.report_json)  # written again when this run is done
        print(f"shard {i}/{n} (students whose crc32(id) mod {n} = {i}): {len(students)} "
              f"student{'' if len(students) == 1 else 's'}: "
              f"{', '.join(students) or '(none)'}")
        if n > 1 and is_sqlite(db_url(course)):
            print("note: a SQLite gradebook serves shards on this machine only (it must not live on NFS); "
                  "shards on several machines need a PostgreSQL gradebook (--db-url; docs/grading.md)")
    return students


def _cmd_autograde(args) -> int:
    course = Course.find(args.course, args.assignment)
    try:
        students = _shard_plan(course, args)
    except ValueError as exc:
        print(f"attnlab autograde: {exc}")
        return 2
    if not _registered(course):
        return 1
    from .autograde import not_graded, write_report_csv, write_report_json
    from ..sandbox import SandboxUnavailable

    if students == []:  # an empty shard: its (empty) reports say it ran
        for path, write in ((args.report_csv, write_report_csv), (args.report_json, write_report_json)):
            if path:
                write([], path)
        print("nothing to grade")
        return 0
    try:
        results = _grade_and_report(course, students, args.notebook or None, args.export,
                                    args.report_csv, args.report_json, args.unsafe_no_sandbox, args.jobs)
    except SandboxUnavailable as exc:
        print(f"attnlab autograde: {exc}")
        return 2
    if args.feedback:
        _feedback(course, students)
    return 1 if not_graded(results) else 0  # a notebook that could not be graded is never silent


def _cmd_collect(args) -> int:
    from .autograde import printable
    from .collect import collect_zip
    from .submissions import WHOLE

    course = Course.find(args.course, args.assignment)
    try:
        notes, left_out = collect_zip(course, args.archive, layout=args.layout, regexp=args.regexp)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"attnlab collect: {exc}")
        return 1
    print(f"collected {len(notes)} submissions into {course.submitted.relative_to(course.root)}/: "
          f"{', '.join(notes) or '(none: check --layout or --regexp)'}")
    names = course.notebook_names()
    for student, by_nb in notes.items():
        folder = course.submitted / student / course.assignment
        missing = [n for n in names if not (folder / f"{n}.ipynb").exists()]
        for key, lines in by_nb.items():
            for line in lines:
                print(printable(f"  {student}{'' if key == WHOLE else ' / ' + key}: {line}"))
        if missing:
            print(printable(f"  {student}: not submitted: {', '.join(missing)}"))
    if left_out:
        print(f"left out {len(left_out)} files of the export:")
        for path, why in left_out:
            print(printable(f"  {path}: {why}"))  # file names in an LMS export are the students' choice
    return 0 if notes else 1


def _cmd_export(args) -> int:
    from .autograde import export_grades

    course = Course.find(args.course)
    try:
        export_grades(course, args.to)
    except RuntimeError as exc:
        print(f"attnlab export: {exc}")
        return 1
    print(f"gradebook exported by nbgrader: {args.to}")
    if args.canvas or args.moodle:
        return _lms_export(course, args)
    return 0


def _lms_export(course: Course, args) -> int:
    """The LMS import files from the CSV nbgrader just wrote (:mod:`.lms`)."""
    import csv

    from . import lms
    from .autograde import printable

    columns = {}
    for spec in args.lms_column or []:
        assignment, sep, header = spec.partition("=")
        if not sep or assignment not in ASSIGNMENTS or not header.strip():
            print(f"attnlab export: --lms-column {spec!r}: expected ASSIGNMENT=HEADER with ASSIGNMENT one of "
                  f"{', '.join(ASSIGNMENTS)}, e.g. {ASSIGNMENT}='Attention kernels (4711)'")
            return 2
        columns[assignment] = header.strip()
    with open(args.to, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ids = lms.read_ids(course.root)
    written = []
    if args.canvas:
        written.append(("Canvas gradebook import", lms.write_canvas(args.canvas, rows, ids, columns)))
    if args.moodle:
        written.append((f"Moodle grading worksheet ({args.moodle_assignment})",
                        lms.write_moodle(args.moodle, rows, ids, args.moodle_assignment)))
    for what, out in written:
        print(f"{what}: {out.path} ({len(out.students)} students)")
        for line in out.notes():
            print(printable(f"  {line}"))
    if not ids:
        print(f"  no LMS ids recorded ({lms.IDS_FILE}): `attnlab collect` records them from a Canvas or Moodle export")
    return 0 if all(out.students for _, out in written) else 1


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
    return _feedback(Course.find(args.course, args.assignment), args.student or None)


def _cmd_grade_samples(args) -> int:
    from .build import build, generate_assignment
    from ..samples import SAMPLE_STUDENTS, forget_students, write_main_samples

    course = Course.find(args.course)
    start = time.perf_counter()
    build(course)
    # Earlier sample grades would stop nbgrader from registering changed notebooks: drop them first.
    forget_students(course, SAMPLE_STUDENTS)
    assignments = course.assignments()
    for each in assignments:
        generate_assignment(each)
    print(f"built release/ from notebooks/ and registered {', '.join(a.assignment for a in assignments)} "
          f"in the gradebook in {time.perf_counter() - start:.1f} s")
    from ..sandbox import SandboxUnavailable

    results = []
    for i, each in enumerate(assignments):
        students = write_main_samples(each)
        print(f"\n== {each.assignment} ==\nsample submissions: {', '.join(students)}\n")
        last = i == len(assignments) - 1  # nbgrader export writes every assignment: once, at the end
        report = course.root / ("grading_report.csv" if i == 0 else f"grading_report_{each.assignment}.csv")
        try:
            results += _grade_and_report(each, students, None, course.root / "grades.csv" if last else None,
                                         report, allow_unsafe=args.unsafe_no_sandbox, jobs=args.jobs)
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


_DESCRIPTIONS = {
    "build": "Build the course: notebooks/*.py (jupytext) -> source/<assignment>/ (the instructor "
             "version) -> release/<assignment>/ (nbgrader generate_assignment). --check only reports "
             "which files are stale.",
    "samples": "Write the bundled sample submissions (reference: the model solutions; blank: the release "
               "as handed out; typical_mistakes: one typical bug per notebook) into submitted/.",
    "autograde": "Autograde submitted/<student>/<assignment>/, one notebook at a time in a worker "
                 "process with a time limit, then print the points per student and notebook, every lost "
                 "point with its reason and the grader's notes.",
    "collect": "Collect an LMS zip export into submitted/<student>/<assignment>/ (nbgrader zip_collect). "
               "Student ids are the LMS's own ids with the name for readability (Moodle's participant id, "
               "Canvas's user id); misnamed notebooks are renamed; every file left out is listed with the "
               "reason.",
    "export": "Export the gradebook (autograded and manual scores) to a CSV, one row per graded submission "
              "(nbgrader export); answers not graded by hand yet count 0 in score, their points are in "
              "to_be_graded (complete: no). --canvas and --moodle also write the import files of Canvas's "
              "gradebook and of a Moodle assignment's grading worksheet, for the students `attnlab collect` "
              "read from that LMS's export (their ids are in lms_ids.csv).",
    "feedback": "Write feedback/<student>/<assignment>/<notebook>.html for each graded student "
                "(nbgrader generate_feedback): the autograded notebook with the hidden tests, each failing "
                "check's message and the grader's notes; answers not graded by hand yet are marked \"to be "
                "graded by hand\".",
    "grade-samples": "The main job: build source/ and release/, register both assignments, write the sample "
                     "submissions, autograde them, print one table per assignment and export grades.csv. Exits non-zero "
                     "if the reference loses a point or the blank release earns one.",
}


UNSAFE_HELP = ("grade even where bubblewrap is missing, WITHOUT the sandbox: learner code then runs with your "
               "rights and can read or rewrite gradebook.db and other submissions, change later grades, "
               "leave processes behind and kill the grader")


def _jobs_option(p) -> None:
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="grading workers side by side, one student at a time each, each on its own cores (default: "
                        "one per GPU on a GPU host, else one per core; printed). N is capped so that N kernels at "
                        "their memory limit (ATTNLAB_KERNEL_MEMORY_GB, default 8) fit in memory; worker i gets GPU "
                        "i mod #GPUs. A notebook that times out, loses its kernel or runs out of memory while "
                        "other workers run is graded again alone, and that result counts")


def parser(more_commands=None) -> argparse.ArgumentParser:
    """The ``attnlab`` parser: this module's commands, then ``more_commands(sub, course)`` adds the others
    (:mod:`attnlab.tools.command` adds the learner's, which sit in the layer above the grader)."""
    parser = argparse.ArgumentParser(prog="attnlab", usage="attnlab [-h] [--course COURSE] COMMAND ...",
                                     description=plain_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default=None, help="course directory (default: found from the cwd)")
    # Shown in every command's own help too; SUPPRESS keeps a --course given before the command.
    course = argparse.ArgumentParser(add_help=False)
    course.add_argument("--course", default=argparse.SUPPRESS,
                        help="the course directory (default: the one holding the working directory)")
    # The docstring lists the commands, grouped: argparse's own list (in another order) is left out.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS, prog="attnlab")

    def command(name: str, help: str, func):
        p = sub.add_parser(name, help=help, description=_DESCRIPTIONS[name], parents=[course])
        p.set_defaults(func=func)
        return p

    p = command("build", "notebooks/ -> source/ -> release/", _cmd_build)
    p.add_argument("--check", action="store_true", help="only report whether source/ and release/ are stale")

    command("samples", "write the bundled sample submissions into submitted/", _cmd_samples)

    p = command("autograde", "autograde submitted/, one notebook at a time", _cmd_autograde)
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--students", default=None, metavar="A,B,...", help="grade only these students")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="grade shard I of N (0 <= I < N): the students whose crc32(id) mod N = I; writes "
                        "grading_report_shard-I-of-N.csv/.json (merge them with `attnlab report`)")
    p.add_argument("--notebook", action="append", help="grade only this notebook (repeatable)")
    p.add_argument("--export", type=Path, default=None, help="also export the gradebook to this CSV")
    p.add_argument("--report-csv", type=Path, default=None, help="write per-notebook results here")
    p.add_argument("--report-json", type=Path, default=None, help="write every result, cell and note here")
    p.add_argument("--feedback", action="store_true", help="then generate the feedback HTML")
    assignment_option(p)
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=UNSAFE_HELP)
    gradebook.add_db_option(p)
    _jobs_option(p)

    p = command("collect", "collect an LMS zip export into submitted/ (nbgrader zip_collect)", _cmd_collect)
    p.add_argument("archive", type=Path, help="the zip file downloaded from the LMS")
    p.add_argument("--layout", choices=["auto", "canvas", "moodle", "folders"], default="auto",
                   help="how the export names each student's files (default: recognise it)")
    p.add_argument("--regexp", default=None,
                   help="nbgrader's named_regexp instead (groups student_id and file_id, matched on the path)")
    assignment_option(p)

    p = command("export", "export the gradebook to a CSV (nbgrader export)", _cmd_export)
    p.add_argument("--to", type=Path, default=Path("grades.csv"), help="the CSV to write (default grades.csv)")
    p.add_argument("--canvas", type=Path, default=None, metavar="CSV",
                   help="also write Canvas's gradebook import file, keyed by the Canvas user ids `attnlab collect` read")
    p.add_argument("--moodle", type=Path, default=None, metavar="CSV",
                   help="also write the Moodle assignment's grading worksheet (--moodle-assignment), keyed by the "
                        "participant ids `attnlab collect` read")
    p.add_argument("--lms-column", action="append", metavar="ASSIGNMENT=HEADER",
                   help="the Canvas column of an assignment, as Canvas names it: 'Name (assignment id)' "
                        "(default: the assignment's name; Canvas then asks which assignment it is)")
    p.add_argument("--moodle-assignment", choices=ASSIGNMENTS, default=ASSIGNMENT,
                   help=f"the assignment of the Moodle worksheet (default {ASSIGNMENT}): Moodle numbers its "
                        "participants per assignment, so each gets a worksheet of its own")
    gradebook.add_db_option(p)

    p = command("feedback", "feedback HTML per student (nbgrader generate_feedback)", _cmd_feedback)
    p.add_argument("--student", action="append", help="only this student (repeatable)")
    assignment_option(p)
    gradebook.add_db_option(p)

    p = command("grade-samples", "the main job: build, write samples, autograde, export grades.csv",
                _cmd_grade_samples)
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=UNSAFE_HELP)
    _jobs_option(p)

    from . import leaderboard, speed, synthetic

    shards.add_report_parser(sub, parents=[course])
    speed.add_parser(sub, parents=[course])
    leaderboard.add_parser(sub, parents=[course])
    synthetic.add_parser(sub, parents=[course])
    if more_commands is not None:
        more_commands(sub, course)
    taking = [name for name, p in sub.choices.items()
              if any("--assignment" in a.option_strings for a in p._actions)]
    parser.epilog = textwrap.fill(
        f"{', '.join(taking)} work on one assignment: --assignment {ASSIGNMENT} (the default, notebooks 01-06) "
        f"or --assignment {ASSIGNMENTS[1]} (notebooks 07 on); the other commands work on both (selfcheck "
        f"tells them by the notebook).", 100) + '\n\nRun "attnlab COMMAND --help" for a command\'s options.'

    return parser

