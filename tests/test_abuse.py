"""Grading survives every way a submission can be broken (samples/abuse/): the batch finishes, the
reference keeps full marks and the blank release scores 0 beside the abusers, each notebook gets the
points its tests earned, the report, the notes and the feedback say what happened, and the attacks
on the grader (section 10 of cases.py) leave nothing behind on the machine.

One session fixture (``abused`` in conftest.py) runs the instructor's whole path once: a Canvas zip
export -> ``attnlab collect`` -> ``attnlab autograde`` -> ``attnlab export`` -> ``attnlab feedback``.
"""

from __future__ import annotations

import csv
import glob
import html
import importlib.util
import json
import os
import re
import shutil
import sqlite3
import tempfile

import nbformat
import pytest

from attnlab.grading.host.submissions import NOTES_FILE

from attnlab.grading.abuse import load_cases

from .conftest import ABUSE_NOTEBOOKS, ROOT, Course

CASES = load_cases(Course(ROOT))
_spec = importlib.util.spec_from_file_location("abuse_cases", ROOT / "samples" / "abuse" / "cases.py")
ABUSE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ABUSE)


def _planted_now() -> list[str]:
    """Files of the planting and daemon cases found outside any sandbox: in the shared folders, in
    site-packages, and in kernel scratch folders left behind."""
    found = [p for p in ABUSE.planted_paths() if os.path.exists(p)]
    found += glob.glob(os.path.join(tempfile.gettempdir(), "attnlab-run-*", "attnlab"))
    return found


@pytest.fixture(scope="module", autouse=True)
def _remove_what_attacks_planted():
    """Whatever an attack managed to write (only where grading is not isolated) is removed after
    this module, so a failing run cannot break the machine's later Python processes."""
    yield
    for path in ABUSE.planted_paths():
        marked = os.path.join(path, "__init__.py") if os.path.isdir(path) else path
        try:
            if ABUSE.MARK in open(marked).read():
                (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
        except OSError:
            pass


def _tests(course, notebook) -> dict[str, float]:
    """grade_id -> points of the autograded test cells of ``notebook``."""
    out = {}
    for cell in nbformat.read(course.source / f"{notebook}.ipynb", as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution") and cell.cell_type == "code":
            out[meta["grade_id"]] = meta["points"]
    return out


def test_batch_finishes_and_every_notebook_is_accounted_for(abused):
    expected = {(s, n): "graded" for s in ("reference", "blank") for n in ABUSE_NOTEBOOKS}
    expected.update({(c.student, n): c.expect[n].status if n in c.expect else "missing"
                     for c in abused.cases for n in ABUSE_NOTEBOOKS})
    assert {k: r.status for k, r in abused.results.items()} == expected
    graded = [r for r in abused.results.values() if r.status == "graded"]
    # no notebook came near the per-notebook wall-clock limit: nothing hung
    assert max(r.seconds for r in graded) < 120, sorted((r.seconds, r.student, r.notebook) for r in graded)[-3:]
    print(f"\nabuse batch: {len(graded)} notebooks graded in {abused.seconds['autograde']:.0f} s; "
          f"slowest: " + ", ".join(f"{r.student}/{r.notebook[:2]} {r.seconds:.1f} s"
                                   for r in sorted(graded, key=lambda r: -r.seconds)[:5]))


@pytest.mark.parametrize("notebook", ABUSE_NOTEBOOKS)
def test_reference_keeps_full_marks_beside_the_abusers(abused, notebook):
    r = abused.results[("reference", notebook)]
    assert r.status == "graded", r.reason
    assert r.points == r.max_points > 0, r.losses()
    assert r.notes == []  # nothing was repaired, restored or flagged


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_abusive_submission_gets_what_it_earned(abused, case):
    for notebook in ABUSE_NOTEBOOKS:
        r = abused.results[(case.student, notebook)]
        expect = case.expect.get(notebook)
        if expect is None:
            assert r.status == "missing", (notebook, r.status, r.reason)
            continue
        assert r.status == expect.status, f"{case.why}: {notebook} {r.status}: {r.reason}"
        if expect.status == "graded":
            tests = _tests(abused.course, notebook)
            lost = {c.grade_id for c in r.cells if c.points < c.max_points}
            assert lost == set(expect.lost), f"{case.why}: lost {sorted(lost)}; {r.losses()}"
            assert r.points == sum(p for gid, p in tests.items() if gid not in expect.lost)
            for c in r.cells:  # every loss has a reason a learner can act on
                if c.grade_id in expect.lost:
                    assert c.reason and "no points" not in c.reason, (c.grade_id, c.reason)
            reasons = " | ".join(r.losses())
        else:
            reasons = r.reason
        for text in expect.reasons:
            assert text in reasons, f"{case.why}: {text!r} not in {reasons!r}"
        notes = " | ".join(r.notes + r.needs_review)  # review flags are reported apart, still notes
        for text in expect.notes:
            assert text in notes, f"{case.why}: {text!r} not in notes {notes!r}"


def test_report_prints_points_and_a_reason_for_every_loss(abused):
    out = abused.output["autograde"]
    table = out[out.index("Autograded points"):]
    assert re.search(r"^reference\s+6/6\s+10/10\s+3/3\s+19/19$", table, re.MULTILINE), table[:2000]
    lines = out.splitlines()
    for r in abused.results.values():
        for loss in r.losses():
            assert f"  {r.student} / {r.notebook}: {loss}" in lines, loss
        for note in r.notes:
            assert f"  {r.student} / {r.notebook}: {note}" in lines, note
    assert "Grader's notes" in out


def test_collect_reads_the_canvas_export_and_renames_copies(abused):
    out = abused.output["collect"]
    assert "abuse-renamed / 02_flash_forward: submitted as 'Copy of 02_flash_forward.ipynb'" in out
    assert "abuse-missing: not submitted: 02_flash_forward" in out
    folder = abused.course.submitted / "abuse-renamed" / "attention_kernels"
    assert {"01_online_softmax.ipynb", "02_flash_forward.ipynb"} <= {p.name for p in folder.iterdir()}
    # the grader's notes on the moves stay in submitted/: not in autograded/, so not in the feedback
    assert (folder / NOTES_FILE).is_file()
    for stage in (abused.course.autograded, abused.course.root / "feedback"):
        assert not list((stage / "abuse-renamed").rglob(NOTES_FILE)), stage


def test_export_writes_one_row_per_student(abused):
    rows = list(csv.DictReader(open(abused.course.root / "grades.csv")))
    by = {r["student_id"]: r for r in rows}
    assert set(by) == {"reference", "blank"} | {c.student for c in abused.cases}
    assert float(by["reference"]["raw_score"]) == 19  # autograded points; written answers are graded later
    assert float(by["abuse-missing"]["raw_score"]) == 6
    report = list(csv.DictReader(open(abused.course.root / "report.csv")))
    assert {"student", "notebook", "points", "losses", "notes"} <= set(report[0])


def _text(path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_feedback_shows_the_failing_checks_message_and_the_notes(abused):
    folder = abused.course.root / "feedback" / "abuse-stripped" / "attention_kernels"
    assert {p.name for p in folder.glob("*.html")} == {"01_online_softmax.html"}
    text = _text(folder / "01_online_softmax.html")
    failure = abused.results[("abuse-stripped", "01_online_softmax")].cells[-1].reason
    assert failure.startswith("AssertionError: m + log(l) (the logsumexp) [shape=(3, 30), block_size=5")
    assert failure.removeprefix("AssertionError: ")[:150] in text  # the check's own message
    assert "Grader's notes" in text and "matched them back by content" in text
    ref = _text(abused.course.root / "feedback" / "reference" / "attention_kernels" / "01_online_softmax.html")
    assert "Grader's notes" not in ref and "AssertionError" not in ref
    from attnlab.variants import shapes  # the variant, in the gradebook's comment on the answer cell

    assert f"Shapes of these predictions: T = {shapes('predict-bytes', 'reference')['T']} (the variant of " \
           f"student id 'reference')" in ref
    assert "NO FEEDBACK" not in abused.output["feedback"]


def test_kernel_files_and_output_stay_out_of_the_autograded_folder(abused):
    folder = abused.course.autograded / "abuse-output-and-files" / "attention_kernels"
    assert sorted(p.name for p in folder.iterdir()) == ["01_online_softmax.ipynb"]
    assert (folder / "01_online_softmax.ipynb").stat().st_size < 400_000
    # megabytes under a non-figure image type, in metadata and in a traceback are capped too
    uncounted = abused.course.autograded / "abuse-uncounted-output" / "attention_kernels" / "01_online_softmax.ipynb"
    assert uncounted.stat().st_size < 400_000
    nb = nbformat.read(folder / "01_online_softmax.ipynb", as_version=4)
    printed = sum(len(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert printed < 250_000


def test_no_learner_script_reaches_the_instructors_page(abused):
    """Formgrader renders the autograded notebook into the instructor's Jupyter page unsanitized."""
    nb = nbformat.read(abused.course.autograded / "abuse-instructor-script" / "attention_kernels"
                       / "01_online_softmax.ipynb", as_version=4)
    rendered = [c.source for c in nb.cells if c.cell_type == "markdown"]  # code cells render as text
    rendered += [json.dumps(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(rendered)
    assert "It is exact." in text  # the answer is still there to grade
    for live in ("onerror", "javascript:", "<script", "application/javascript"):
        assert live not in text, live
    from .formgrade import event_attributes, formgrade_html

    assert event_attributes(formgrade_html(nb)) == []  # as formgrader renders it (image width unquoted)


def test_dead_kernel_keeps_the_points_earned_around_it(abused):
    """The crash happened in one test cell; the cells before and after it still ran and scored."""
    nb = nbformat.read(abused.course.autograded / "abuse-dead-oom-killed" / "attention_kernels" / "02_flash_forward.ipynb",
                       as_version=4)
    enames = {c.metadata.get("nbgrader", {}).get("grade_id"): [o.get("ename") for o in c.outputs if o.output_type == "error"]
              for c in nb.cells if c.cell_type == "code"}
    assert enames["test_flash_forward_cross_attention_lengths"] == ["KernelDied"]
    assert enames["test_flash_forward_lse_dtype"] == []  # ran after the restart
    assert nb.cells[0].cell_type == "markdown" and "Grader's notes" in nb.cells[0].source


# ------------------------------------------------------------------------------------ isolation
@pytest.mark.parametrize("notebook", ABUSE_NOTEBOOKS)
def test_blank_release_scores_zero_beside_the_abusers(abused, notebook):
    """Graded after every attacker (students go in name order): nothing they planted earns it a point."""
    r = abused.results[("blank", notebook)]
    assert r.status == "graded", r.reason
    assert r.points == 0 < r.max_points, r.cells


def _outputs(course, student, notebook="01_online_softmax") -> str:
    nb = nbformat.read(course.autograded / student / "attention_kernels" / f"{notebook}.ipynb", as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_planted_modules_and_pth_files_stay_in_the_sandbox(abused):
    out = _outputs(abused.course, "abuse-plant-support-package")
    assert "REFUSED" in out or "PLANTED" in out, out[:2000]  # the attack ran
    assert _planted_now() == []
    assert "ATTNLAB_ABUSE_PTH" not in os.environ  # no .pth ran in this (later) process either


def test_no_process_outlives_its_notebook(abused):
    daemons = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if ABUSE.MARK.encode() in open(cmdline, "rb").read():
                daemons.append(cmdline)
        except OSError:
            pass
    assert daemons == []
    assert not (abused.course.root / "daemon-was-here").exists()


def test_the_kernel_cannot_mount_the_file_system_again(abused):
    """No capabilities in the sandbox, also when grading runs as root."""
    out = _outputs(abused.course, "abuse-remount-root")
    assert "MOUNT REFUSED" in out, out[:2000]
    assert not (abused.course.root / "remounted-was-here").exists()


def test_a_fork_bomb_stays_in_its_own_kernel(abused):
    """The thread bomb gets at most the per-kernel bound of tasks (the reference beside it keeps full
    marks: test_reference_keeps_full_marks_beside_the_abusers)."""
    from attnlab.grading.sandbox.tasks import describe, max_tasks

    bounded, line = describe()
    if not bounded:
        pytest.skip(line)
    started = re.findall(r"THREADS STARTED (\d+)", _outputs(abused.course, "abuse-thread-bomb"))
    assert started and 0 < int(started[0]) < max_tasks(), started


def test_learner_code_cannot_reach_the_gradebook_the_course_or_other_students(abused):
    out = _outputs(abused.course, "abuse-snoop")
    assert "LEAKED" not in out, out[:3000]
    assert out.count("DENIED") == 5, out[:3000]
    with sqlite3.connect(abused.course.root / "gradebook.db") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "pwned" not in tables
    assert (abused.course.root / "nbgrader_config.py").read_text() == (ROOT / "nbgrader_config.py").read_text()


def test_killing_the_kernels_parent_costs_nothing(abused):
    """The kill reaches nothing outside the sandbox: the worker lives on, the notebook is graded in
    full, and the students after it too (test_batch_finishes_and_every_notebook_is_accounted_for)."""
    r = abused.results[("abuse-kill-parent", "01_online_softmax")]
    assert r.status == "graded" and r.points == r.max_points, (r.status, r.reason, r.losses())
    assert "grading process died" not in abused.output["autograde"]


def test_autograde_exits_non_zero_and_says_so_when_a_notebook_could_not_be_graded(abused):
    failed = sorted(f"{s}/{n}" for (s, n), r in abused.results.items() if r.status in ("failed", "timeout"))
    assert failed == ["abuse-corrupt-file/01_online_softmax"]
    assert abused.codes["autograde"] == 1
    assert "NOT GRADED: 1 notebook(s) could not be graded" in abused.output["autograde"]


# ------------------------------------------------------------- limits (issue 30, item 4)
def test_deep_folders_and_a_full_scratch_folder_stay_in_the_sandbox(abused):
    """The scratch folder is a tmpfs of the sandbox with a size: the writes stop there, and nothing of the
    2,500 nested folders is left on the grader's disk (the students after it were graded: the batch test)."""
    out = _outputs(abused.course, "abuse-deep-and-full")
    assert "DISK REFUSED OSError" in out and int(out.split("DISK WRITTEN")[1].split()[0]) < 1024, out[:2000]
    assert glob.glob(os.path.join(tempfile.gettempdir(), "attnlab-*", "**", ABUSE.DEEP_MARK), recursive=True) == []


def test_a_memory_hog_ends_its_kernel_only(abused):
    """Memory in a memfd counts for the kernel: past the limit its kernel dies, is restarted, and grading goes
    on (every student and notebook reported: test_batch_finishes_and_every_notebook_is_accounted_for)."""
    from attnlab.grading.sandbox.tasks import describe_memory

    if not describe_memory()[0]:
        pytest.skip(describe_memory()[1])
    assert "MEMFD HELD 6144" not in _outputs(abused.course, "abuse-memfd-hog")
    assert "Autograded points" in abused.output["autograde"]


def test_the_hosts_cgroups_are_not_readable_from_a_kernel(abused):
    out = _outputs(abused.course, "abuse-cgroup-snoop")
    assert "CGROUPS SEEN 0 0" in out, out[:2000]


def test_a_kernel_cannot_use_the_kernel_keyrings(abused):
    """keyctl, add_key and request_key fail with EPERM in every kernel (the sandbox's seccomp filter)."""
    out = _outputs(abused.course, "abuse-keyring-note")
    assert "KEYRING EPERM EPERM EPERM" in out, out[:2000]


def test_a_flood_of_output_is_dropped_unread(abused):
    """Messages over the grader's iopub cap are refused before they are read: the cell's output says it was
    truncated, and what was kept is far below the flood (the grading process's memory: test_limits.py)."""
    out = _outputs(abused.course, "abuse-print-flood")
    assert "Output truncated" in out and len(out) < 1_000_000, out[-2000:]
