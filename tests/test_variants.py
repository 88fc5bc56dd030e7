"""A variant per student (issue 35, item 3): prediction shapes from the student id, seeds keyed by the course secret."""

from __future__ import annotations

import json

import pytest

from attnlab import variants
from attnlab.checks import generator

from .notebook_runner import autograded_notebook, run_cells

#: Two ids whose shapes differ in every question and from the release's (checked below).
ALICE, BOB = "alice", "student-0"


@pytest.fixture
def grading(monkeypatch):
    """Set the grader's (student, seed key) as the grading kernel has it; no id from the environment."""
    monkeypatch.delenv(variants.STUDENT_ENV, raising=False)
    monkeypatch.delenv(variants.HUB_ENV, raising=False)
    monkeypatch.delenv(variants.SALT_ENV, raising=False)

    def set_(student, salt=None, release_answers=True):
        monkeypatch.setattr(variants, "GRADING", None)
        # what the grader evaluates in the kernel
        json.loads(eval(variants.grading_expression(student, salt, release_answers)))
    monkeypatch.setattr(variants, "GRADING", None)
    return set_


def test_two_students_get_different_variants():
    for q in variants.QUESTIONS:
        a, b, release = (variants.shapes(q, s) for s in (ALICE, BOB, None))
        assert a != b and a != release and b != release, q
    for q, info in variants.QUESTIONS.items():  # spread over the choices, every one within them
        seen = [variants.shapes(q, f"s{i}") for i in range(200)]
        choices = dict(info.choices)
        assert all(v[k] in choices[k] for v in seen for k in v)
        assert len({tuple(v.values()) for v in seen}) == len(info.combos()), q


def test_same_student_same_variant_and_seeds():
    assert [variants.shapes(q, ALICE) for q in variants.QUESTIONS] == \
        [variants.shapes(q, ALICE) for q in variants.QUESTIONS]
    key = variants.seed_key(b"secret", ALICE)
    assert key == variants.seed_key(b"secret", ALICE)
    assert key != variants.seed_key(b"secret", BOB) and key != variants.seed_key(b"other secret", ALICE)
    assert 0 <= key < 2**48


def test_student_id_sources(grading, monkeypatch):
    assert variants.student_id() is None  # self-study: the release's shapes
    assert variants.shapes("predict-bytes") == dict(variants.QUESTIONS["predict-bytes"].release)
    monkeypatch.setenv(variants.HUB_ENV, BOB)  # a JupyterHub single-user server
    assert variants.student_id() == BOB
    monkeypatch.setenv(variants.STUDENT_ENV, ALICE)
    assert variants.student_id() == ALICE
    assert variants.shapes("predict-bytes") == variants.shapes("predict-bytes", ALICE)
    grading(None)  # the grader says: no id (attnlab selfcheck off a hub), whatever the environment says
    assert variants.student_id() is None and variants.shapes("predict-bytes")["T"] == 8192
    grading(BOB, 7)
    assert variants.student_id() == BOB


def test_seed_key_changes_the_tests_inputs(grading, monkeypatch):
    plain = generator(3).initial_seed()
    assert plain == 3  # no key: the notebook's own seeds, as a learner's run has them
    grading(ALICE, variants.seed_key(b"secret", ALICE))
    a = generator(3).initial_seed()
    grading(BOB, variants.seed_key(b"secret", BOB))
    b = generator(3).initial_seed()
    assert len({plain, a, b}) == 3
    grading(ALICE, variants.seed_key(b"secret", ALICE))
    assert generator(3).initial_seed() == a and generator(4).initial_seed() not in (a, 4)
    monkeypatch.setattr(variants, "GRADING", None)
    monkeypatch.setenv(variants.SALT_ENV, str(variants.seed_key(b"secret", ALICE)))  # the feedback's replay
    assert generator(3).initial_seed() == a


def _predictions_of(student):
    """The literal numbers a student types into 01's prediction cell (edits of the model solution)."""
    T = variants.shapes("predict-bytes", student)["T"]
    return [('T = shapes("predict-bytes")["T"]  # the T printed above', f"T = {T}")]


def _run_01(edits):
    cells = autograded_notebook("01_online_softmax").cells
    failed, _ = run_cells(cells, given=("setup", "shapes-predict-bytes"), edits_cell="predict-bytes", edits=edits,
                           only={"test-predict-bytes"}, autograding=True)
    return failed


def test_own_answers_pass_and_a_copy_loses_the_prediction_points(grading):
    grading(ALICE)
    assert _run_01(_predictions_of(ALICE)) == {}
    grading(BOB)  # BOB hands in ALICE's notebook
    failed = _run_01(_predictions_of(ALICE))
    assert set(failed) == {"test-predict-bytes"}
    assert f"fit the shapes T = {variants.shapes('predict-bytes', ALICE)['T']}" in failed["test-predict-bytes"]
    assert f"T = {variants.shapes('predict-bytes', BOB)['T']}" in failed["test-predict-bytes"]
    assert _run_01(_predictions_of(BOB)) == {}  # BOB's own numbers pass
    grading(None)  # a self-study learner is checked against the release's shapes
    assert _run_01(_predictions_of(None)) == {}
    assert set(_run_01(_predictions_of(ALICE))) == {"test-predict-bytes"}


def test_answers_for_the_release_shapes_count_unless_the_course_says_otherwise(grading, monkeypatch, capsys):
    """A student who worked where no id was set (a laptop, Colab) answered the release's shapes: honest
    work, which keeps its points with a note saying how to see their own shapes; a class that always
    works on a hub can turn that off (GradingExecute.release_answers), and then it loses them as a copy does."""
    flagged = []
    monkeypatch.setattr("attnlab.core.review.flag", flagged.append)
    expected = lambda T, block: {"causal_tiles_visited": (T // block) * (T // block + 1) // 2}  # noqa: E731
    release = dict(variants.QUESTIONS["predict-tiles"].release)
    assert variants.shapes("predict-tiles", BOB) != release
    answers = expected(**release)
    grading(BOB)
    variants.check_predictions("predict-tiles", answers, expected, rel=1e-9)
    note = capsys.readouterr().out  # printed, and noted for the report (attnlab.core.review.note), not flagged
    assert "release's shapes" in note and repr(BOB) in note and variants.STUDENT_ENV in note and not flagged
    grading(BOB, release_answers=False)
    with pytest.raises(AssertionError, match="not this notebook's"):
        variants.check_predictions("predict-tiles", answers, expected, rel=1e-9)
    assert len(flagged) == 1 and "copied" in flagged[0]


def test_copy_is_flagged_for_review_and_a_plain_mistake_is_not(grading, monkeypatch):
    flagged = []
    monkeypatch.setattr("attnlab.core.review.flag", flagged.append)
    grading(BOB)
    answers = {"causal_tiles_visited": 0}
    expected = lambda T, block: {"causal_tiles_visited": (T // block) * (T // block + 1) // 2}  # noqa: E731
    n = variants.shapes("predict-tiles", ALICE)["T"] // variants.shapes("predict-tiles", ALICE)["block"]
    answers["causal_tiles_visited"] = n * (n + 1) // 2
    with pytest.raises(AssertionError, match="not this notebook's"):
        variants.check_predictions("predict-tiles", answers, expected, rel=1e-9)
    assert len(flagged) == 1 and repr(BOB) in flagged[0] and "copied" in flagged[0]
    flagged.clear()
    with pytest.raises(AssertionError, match="Your shapes: T = 512, block = 128") as info:
        variants.check_predictions("predict-tiles", {"causal_tiles_visited": 11}, expected, rel=1e-9)
    assert "not this notebook's" not in str(info.value) and not flagged
    with pytest.raises(AssertionError, match="plain number"):  # still exact types only
        variants.check_predictions("predict-tiles", {"causal_tiles_visited": "10"}, expected, rel=1e-9)


def test_the_kernel_never_gets_the_course_secret(monkeypatch):
    from attnlab.grading.sandbox import kernel_env
    from attnlab.grading.course import SECRET_ENV

    assert SECRET_ENV not in kernel_env({SECRET_ENV: "s3cret", "HOME": "/x"})
    assert "s3cret" not in variants.grading_expression(ALICE, variants.seed_key(b"s3cret", ALICE))


def test_describe_names_the_shapes_and_the_replay():
    text = variants.describe("07_triton_backward", ALICE, 12345)
    assert "student id 'alice'" in text and "predict-backward-cost (B = 4, H = 16, T = 4096, D = 64)" in text
    assert f"{variants.SALT_ENV}=12345" in text
    assert "release's shapes" in variants.describe("04_triton_softmax", None, None)


def test_graded_end_to_end_variant_and_copy(graded):
    """Through nbgrader and the sandbox (the sample students, conftest's ``graded``): the grader gives each
    kernel its student's variant and seed key (a function of the id and the course secret alone, so a
    regrade gives the same); "copier" handed in notebook 01 with the numbers of "reference"'s variant
    and loses the prediction points, flagged; the variant is in the report, the gradebook's comments
    and the autograded notebook (so in the feedback)."""
    import nbformat
    from nbgrader.api import Gradebook

    from attnlab.grading.course import course_secret

    c, nb = graded.course, "01_online_softmax"
    reference, copier = graded.results[("reference", nb)], graded.results[("copier", nb)]
    assert variants.shapes("predict-bytes", "reference") != variants.shapes("predict-bytes", "copier")
    assert reference.points == reference.max_points
    lost = {cell.grade_id for cell in copier.cells if cell.points < cell.max_points}
    assert lost == {"test-predict-bytes"}, copier.losses()
    assert any("copied" in n and "predict-bytes" in n for n in copier.needs_review), copier.needs_review
    secret = course_secret(c)
    for student, r in (("reference", reference), ("copier", copier)):
        assert r.variant == variants.describe(nb, student, variants.seed_key(secret, student))
    with Gradebook(f"sqlite:///{c.root / 'gradebook.db'}", "attention-kernels") as gb:
        for student in ("reference", "copier"):
            comment = gb.find_comment("predict-bytes", nb, c.assignment, student).comment
            assert f"T = {variants.shapes('predict-bytes', student)['T']}" in comment and repr(student) in comment
    out = nbformat.read(c.autograded / "copier" / c.assignment / f"{nb}.ipynb", as_version=4)
    shown, = (cell for cell in out.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == "shapes-predict-bytes")
    assert "the variant of student id 'copier'" in "".join(o.get("text", "") for o in shown.outputs)


def test_workers_starting_together_share_one_course_secret(tmp_path, monkeypatch):
    """Every grading worker needs the secret for its first notebook's seed key: when none exists yet,
    processes that make it at the same time must all end up with the same one."""
    import multiprocessing

    from attnlab.grading.course import SECRET_ENV

    monkeypatch.delenv(SECRET_ENV, raising=False)
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        root = tmp_path / str(attempt)
        root.mkdir()
        barrier, out = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_read_secret, args=(str(root), barrier, out)) for _ in range(8)]
        for p in procs:
            p.start()
        got = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join()
        assert len(set(got)) == 1 and len(got[0]) == 64, got
        assert [p.name for p in root.iterdir()] == [".attnlab-secret"]


def _read_secret(root, barrier, out):
    from pathlib import Path

    from attnlab.grading.course import Course
    from attnlab.grading.course import course_secret

    barrier.wait()
    try:
        out.put(course_secret(Course(Path(root))).decode())
    except Exception as exc:  # noqa: BLE001 (reported to the test)
        out.put(f"{type(exc).__name__}: {exc}")


def test_whose_variant_the_grader_gives_a_kernel(tmp_path, monkeypatch):
    """nbgrader's student id with a seed key from the course secret; attnlab selfcheck's choice (the learner's
    own id, or none) with the notebooks' own seeds."""
    from traitlets.config import Config

    from attnlab.grading.worker.execute import GradingExecute
    from attnlab.grading.course import SECRET_ENV

    monkeypatch.setenv(SECRET_ENV, "s")
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    resources = {"nbgrader": {"student": BOB, "notebook": "01_online_softmax"}}
    assert GradingExecute(config=config)._variant(resources) == (BOB, variants.seed_key(b"s", BOB))
    assert GradingExecute(config=config)._variant({}) == (None, None)  # a plain nbconvert run
    for chosen, whose in (("", None), (ALICE, ALICE)):
        config.GradingExecute.variant_student = chosen
        assert GradingExecute(config=config)._variant(resources) == (whose, None)
