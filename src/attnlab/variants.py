"""A variant per student: the shapes of the "predict before you measure" questions, and the tests' seeds.

Each student's prediction questions name their own shapes (drawn from a small set per question, so
the arithmetic stays meaningful), and the hidden tests check the answers against that student's
shapes: a notebook copied from a classmate answers the classmate's shapes and loses those points.
The tests' random inputs are drawn for each student too.

Two keys, for two needs (notes/decisions.md, "A variant per student"):

- the **shapes** are a public function of the student id alone (SHA-256, no secret), so the learner's
  own notebook can print them wherever it runs;
- the **seeds** of the tests' inputs are mixed with a key only the grader can compute,
  HMAC-SHA256(course secret, student id) (:func:`seed_key`; the secret is the leaderboard's,
  :func:`attnlab.grading.course.course_secret`). The grader hands the kernel that number, never
  the secret.

The student id, first found:

1. the grader's: set in the grading kernel before any learner code runs (:func:`grading_expression`);
2. ``$ATTNLAB_STUDENT`` (a course may tell its students to set it);
3. ``$JUPYTERHUB_USER`` (a JupyterHub single-user server; nbgrader's exchange files a submission
   under that name).

With none (self-study, Colab, a plain JupyterLab) the notebook shows and checks the release's shapes.
``$ATTNLAB_SEED_SALT`` set to the key a feedback names replays the inputs a grading run drew.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
import os
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["QUESTIONS", "Question", "student_id", "shapes", "show_shapes", "check_predictions", "mix_seed",
           "seed_key", "grading_expression", "describe", "record", "SALT_ENV", "STUDENT_ENV", "HUB_ENV"]

STUDENT_ENV = "ATTNLAB_STUDENT"
HUB_ENV = "JUPYTERHUB_USER"
SALT_ENV = "ATTNLAB_SEED_SALT"


@dataclass(frozen=True)
class Question:
    """One prediction cell's shapes: the release's, and the values each dimension may take."""
    notebook: str
    release: tuple[tuple[str, int], ...]
    choices: tuple[tuple[str, tuple[int, ...]], ...]

    def combos(self) -> list[dict[str, int]]:
        """Every variant of this question (the release's among them)."""
        names = [n for n, _ in self.choices]
        return [dict(zip(names, values)) for values in itertools.product(*(c for _, c in self.choices))]


def _q(notebook: str, **dims: tuple[int, tuple[int, ...]]) -> Question:
    return Question(notebook, tuple((k, r) for k, (r, _) in dims.items()), tuple((k, c) for k, (_, c) in dims.items()))


#: answer cell's grade_id -> its shapes. Every choice keeps the question's point: 02 keeps at least 4
#: tiles a side, 03's FLOPs per byte saved (D/2) stay under an H200's ridge point (~165).
QUESTIONS = MappingProxyType({
    "predict-bytes": _q("01_online_softmax", T=(8192, (1024, 2048, 4096, 8192, 16384))),
    "predict-tiles": _q("02_flash_forward", T=(1024, (512, 1024, 2048, 4096)), block=(64, (32, 64, 128))),
    "predict-recompute": _q("03_flash_backward", T=(8192, (2048, 4096, 8192, 16384)), D=(64, (64, 128))),
    "predict-backward-cost": _q("07_triton_backward", B=(8, (4, 8, 16)), H=(16, (16, 32)),
                                T=(4096, (2048, 4096, 8192)), D=(64, (64, 128))),
})

# Set by the grader in a grading kernel (before any learner code; attnlab.grading.kernel.guard puts it back if
# a cell rebinds it): (student id or None, seed key or None). None: not graded, read the environment.
GRADING: tuple[str | None, int | None] | None = None


def _set_grading(student: str | None, salt: int | None, release_answers: bool = True) -> str:
    """Called by the grader in the kernel (see :func:`grading_expression`); returns JSON text."""
    global GRADING
    GRADING = (student or None, salt, bool(release_answers))
    return '"ok"'


def _release_answers_count() -> bool:
    """Whether answers for the release's shapes earn their points (see :func:`grading_expression`)."""
    return GRADING is None or GRADING[2]


def student_id() -> str | None:
    """The student id whose variant this process shows and checks (see the module docstring), or None."""
    if GRADING is not None:
        return GRADING[0]
    return os.environ.get(STUDENT_ENV, "").strip() or os.environ.get(HUB_ENV, "").strip() or None


def _salt() -> int | None:
    if GRADING is not None:
        return GRADING[1]
    text = os.environ.get(SALT_ENV, "").strip()
    return int(text) if text.isdigit() else None


def shapes(question: str, student: str | None = ...) -> dict[str, int]:
    """The shapes of prediction ``question`` (an answer cell's grade_id, a key of :data:`QUESTIONS`)
    for ``student`` (default: :func:`student_id`; None: the release's).

    Each dimension is picked from its choices by SHA-256 of the question and the student id: the
    same id always gets the same shapes, on any machine.

    Raises:
        KeyError: an unknown question.
    """
    q = QUESTIONS[question]
    student = student_id() if student is ... else student
    if not student:
        return dict(q.release)
    digest = int.from_bytes(hashlib.sha256(f"attnlab-variant\0{question}\0{student}".encode()).digest(), "big")
    out = {}
    for name, choices in q.choices:
        digest, index = divmod(digest, len(choices))
        out[name] = choices[index]
    return out


def _text(values: dict[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items())


def show_shapes(question: str) -> None:
    """Print the shapes the learner answers ``question`` for (the given cell above each question)."""
    student, mine, release = student_id(), shapes(question), dict(QUESTIONS[question].release)
    if student:
        print(f"Your shapes: {_text(mine)}  (the variant of student id {student!r}; answer for these, "
              f"not the release's {_text(release)})")
    else:
        print(f"Your shapes: {_text(mine)}  (the release's: no student id here. In a course that grades "
              f"a variant per student, your hub shows yours, or set ${STUDENT_ENV} to your id before starting Jupyter)")


def check_predictions(question: str, answers: dict, expected, *, rel: float | dict = 0.02) -> None:
    """Fail unless each answer is within ``rel`` of ``expected(**shapes(question))[name]``.

    Args:
        question: the answer cell's grade_id (a key of :data:`QUESTIONS`).
        answers: answer name -> the learner's value (a plain number).
        expected: a function of the question's dimensions (keywords) returning name -> model answer.
        rel: relative tolerance, one for all or name -> tolerance.

    Raises:
        AssertionError: a wrong answer (named, with the shapes it had to use). When every answer fits
            another student's variant instead, the message says so and the notebook is flagged for
            review (:func:`attnlab.core.review.flag`). Answers that fit the release's shapes (the
            notebook ran without the student's id) pass with a printed note, unless the grader was told
            otherwise (:func:`grading_expression`).
    """
    from .checking.answers import assert_number, real_number  # torch, only when answers are checked

    got = {name: real_number(value, name) for name, value in answers.items()}
    mine = shapes(question)

    def tol(name):
        return rel[name] if isinstance(rel, dict) else rel

    def fits(values):
        want = expected(**values)
        return all(math.isfinite(got[n]) and abs(got[n] - want[n]) <= tol(n) * abs(want[n]) for n in got)

    try:
        want = expected(**mine)
        for name in got:
            assert_number(got[name], want[name], name=name, rel=tol(name))
    except AssertionError as exc:
        others = [c for c in QUESTIONS[question].combos() if c != mine and fits(c)]
        if not others:
            raise AssertionError(f"{exc} (Your shapes: {_text(mine)}.)") from None
        student = student_id()
        release = dict(QUESTIONS[question].release)
        if student and release in others and _release_answers_count():
            # the notebook ran without its student's id (a laptop or Colab where $ATTNLAB_STUDENT was
            # not set): honest work, which a copy of a classmate's variant is not
            from .core.review import note

            note(f"the answers of {question} are for the release's shapes ({_text(release)}), not student id "
                 f"{student!r}'s ({_text(mine)}): the notebook ran without the id. They count; set "
                 f"${STUDENT_ENV} to your id before starting Jupyter (docs/student.md).")
            return
        why = (f"the answers of {question} fit the shapes {_text(others[0])}, not this notebook's "
               f"({_text(mine)}{f', student id {student!r}' if student else ''})")
        if student:
            from .core.review import flag

            flag(why + ": copied from another student's notebook, or worked under another id?")
        raise AssertionError(f"{why}. Answer for your own shapes, printed above the question.") from None


def mix_seed(seed: int) -> int:
    """``seed`` as the tests use it: unchanged without a seed key, else mixed with the key (a
    different, reproducible stream per student and seed)."""
    salt = _salt()
    if salt is None:
        return seed
    digest = hashlib.blake2b(f"{salt}\0{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # torch takes seeds below 2**63


# ----------------------------------------------------------------------------- the grader's side
def seed_key(secret: bytes, student: str) -> int:
    """The key that makes ``student``'s test inputs: HMAC-SHA256 under the course secret, 48 bits
    (so it reads as a plain number). Only the grader knows the secret, so no learner can list
    another student's inputs or their own before grading."""
    return int.from_bytes(hmac.new(secret, f"attnlab-seeds\0{student}".encode(), hashlib.sha256).digest()[:6], "big")


def grading_expression(student: str | None, salt: int | None, release_answers: bool = True) -> str:
    """Python source the grader evaluates in a grading kernel before any learner code runs: this
    kernel's student id (None: the release's shapes), seed key (None: the notebooks' own seeds), and
    whether prediction answers for the release's shapes earn their points under a student id
    (``release_answers``: a notebook run where no id was set; False for a course whose students always
    work where the id is known, such as a hub: such answers then lose their points as a copy does)."""
    return (f"__import__('attnlab.variants').variants._set_grading({student!r}, {salt!r}, "
            f"{bool(release_answers)!r})")


def describe(notebook: str, student: str | None, salt: int | None) -> str:
    """The grader's note on ``notebook``'s variant (shown in the feedback and the report)."""
    mine = [f"{q} ({_text(shapes(q, student))})" for q, info in QUESTIONS.items() if info.notebook == notebook]
    who = f"variant of student id {student!r}" if student else "no student id, the release's shapes"
    seeds = (f"test inputs drawn with seed key {salt} ({SALT_ENV}={salt} replays them)" if salt is not None
             else "test inputs from the notebook's own seeds")
    return f"{who}: " + (f"prediction shapes {'; '.join(mine)}; " if mine else "") + seeds


def record(gb, assignment: str, student: str, notebook: str, variant_student: str | None) -> None:
    """Write the shapes of ``variant_student``'s variant into nbgrader's automatic comment of each
    prediction answer cell of ``notebook`` in ``student``'s submission (after nbgrader's autograde,
    which resets those comments): formgrader shows it beside the answer and the feedback under it.
    ``gb``: an open ``nbgrader.api.Gradebook``. Manual comments stay as they are (nbgrader shows
    them instead)."""
    from nbgrader.api import MissingEntry

    for question, info in QUESTIONS.items():
        if info.notebook != notebook:
            continue
        try:
            comment = gb.find_comment(question, notebook, assignment, student)
        except MissingEntry:
            continue
        who = f"the variant of student id {variant_student!r}" if variant_student else "the release's: no student id"
        line = f"Shapes of these predictions: {_text(shapes(question, variant_student))} ({who})."
        comment.auto_comment = f"{comment.auto_comment} {line}" if comment.auto_comment else line
    gb.db.commit()
