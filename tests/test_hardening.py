"""Unit tests of the grader's hardening, without running nbgrader: notebook repair, the static scan,
submission folders, LMS export layouts, the in-kernel guard, time limits (Triton interpreter too)."""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time

import nbformat
import pytest
import torch

from attnlab import checks
from attnlab.core.outcome import Kind, notes_of
from attnlab.grading.host.autograde import CellResult, NotebookResult, failure_reason, format_report
from attnlab.grading.host.collect import parse, slug
from attnlab.grading.worker.repair import align, repair
from attnlab.grading.worker.scan import scan
from attnlab.grading.samples import apply_mistake, load_mistakes, reference_notebook, release_notebook
from attnlab.grading.host.submissions import NOTES_FILE, WHOLE, canonical, normalize_submission

from .conftest import ROOT, Course

COURSE = Course(ROOT)
NAMES = COURSE.all_notebook_names()  # both assignments


def _gids(nb) -> list[str | None]:
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]


def _run(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Python code in a fresh interpreter (the guard and Triton's interpreter switch are process-wide)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


# ------------------------------------------------------------------------------------ repair
@pytest.mark.parametrize("name", NAMES)
def test_reference_release_and_mistakes_need_no_repair(name):
    """No false alarm: the reference, the blank release and every typical mistake come through untouched."""
    release = release_notebook(COURSE, name)
    variants = [reference_notebook(COURSE, name), copy.deepcopy(release)]
    variants += [apply_mistake(reference_notebook(COURSE, name), m) for m in load_mistakes(COURSE)[0] if m.notebook == name]
    for nb in variants:
        before = nbformat.writes(nb)
        assert repair(nb, release) == []
        assert nbformat.writes(nb) == before


def test_copied_test_keeps_the_copy_after_the_solution():
    release = release_notebook(COURSE, "01_online_softmax")
    nb = reference_notebook(COURSE, "01_online_softmax")
    gids = _gids(nb)
    test, solution = gids.index("test_online_softmax_matches_logsumexp"), gids.index("online_softmax_stats")
    pasted = copy.deepcopy(nb.cells[test])
    pasted["id"] = "pasted"
    nb.cells.insert(solution, pasted)  # pasted above the solution: running it there would fail
    notes = repair(nb, release)
    assert _gids(nb).count("test_online_softmax_matches_logsumexp") == 1
    assert "pasted" not in [c["id"] for c in nb.cells]
    assert _gids(nb).index("test_online_softmax_matches_logsumexp") > _gids(nb).index("online_softmax_stats")
    assert any("appeared 2 times" in n for n in notes)


def test_copied_solution_cell_is_kept_as_ordinary_code():
    release = release_notebook(COURSE, "01_online_softmax")
    nb = reference_notebook(COURSE, "01_online_softmax")
    i = _gids(nb).index("online_softmax_stats")
    nb.cells.insert(i + 1, copy.deepcopy(nb.cells[i]))
    nb.cells[i + 1]["id"] = "second"
    repair(nb, release)
    assert _gids(nb).count("online_softmax_stats") == 1
    assert nb.cells[i + 1]["id"] == "second" and "nbgrader" not in nb.cells[i + 1].metadata


def test_stripped_metadata_is_matched_back_including_written_answers():
    release = release_notebook(COURSE, "01_online_softmax")
    nb = reference_notebook(COURSE, "01_online_softmax")
    want = _gids(nb)
    answer = want.index("answer-masked-block")
    nb.cells[answer].source = "Because exp(-inf - (-inf)) is NaN, I offset by zero."
    for cell in nb.cells:
        cell.metadata = {}
    notes = repair(nb, release)
    assert _gids(nb) == want
    assert nb.cells[answer].source.startswith("Because")  # the learner's answer, now gradable by hand
    assert any("matched them back by content" in n for n in notes)


def test_deleted_cells_are_restored_where_they_belong():
    """nbgrader's own add_missing_cells raises KeyError when the cell before is not a graded cell."""
    release = release_notebook(COURSE, "02_flash_forward")
    nb = reference_notebook(COURSE, "02_flash_forward")
    want = [g for g in _gids(nb) if g]
    for gid in ("setup", "test-predict-tiles", "test_flash_forward_lse_dtype", "answer-nan-order"):
        del nb.cells[_gids(nb).index(gid)]
    notes = repair(nb, release)
    assert [g for g in _gids(nb) if g] == want
    assert any("restored" in n and "setup" in n for n in notes)
    assert any("put back empty" in n and "answer-nan-order" in n for n in notes)


def test_unknown_and_broken_metadata_is_removed_and_edits_reset():
    release = release_notebook(COURSE, "01_online_softmax")
    nb = reference_notebook(COURSE, "01_online_softmax")
    nb.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "mine", "grade": True}}))
    nb.cells.append(nbformat.v4.new_code_cell("y = 2", metadata={"nbgrader": {"solution": True}}))
    nb.cells[_gids(nb).index("test_online_softmax_matches_logsumexp")].metadata.nbgrader.update(locked=False, points=99)
    notes = " | ".join(repair(nb, release))
    assert "unknown cell 'mine'" in notes and "incomplete nbgrader metadata" in notes and "(locked, points)" in notes
    assert "nbgrader" not in nb.cells[-1].metadata and "nbgrader" not in nb.cells[-2].metadata
    meta = nb.cells[_gids(nb).index("test_online_softmax_matches_logsumexp")].metadata.nbgrader
    assert meta["locked"] is True and meta["points"] == 3


def test_colab_notebook_gets_unique_cell_ids():
    nb = reference_notebook(COURSE, "01_online_softmax")
    data = json.loads(nbformat.writes(nb))
    data["nbformat_minor"] = 0
    for cell in data["cells"]:
        del cell["id"]
    nb = nbformat.reads(json.dumps(data), as_version=4)
    notes = repair(nb, release_notebook(COURSE, "01_online_softmax"))
    ids = [c["id"] for c in nb.cells]
    assert len(set(ids)) == len(ids) and nb.nbformat_minor == 5
    assert any("nbformat 4.0" in n for n in notes)
    nbformat.validate(nb)


def test_renamed_and_doubly_defined_functions_are_reported():
    release = release_notebook(COURSE, "01_online_softmax")
    nb = reference_notebook(COURSE, "01_online_softmax")
    i = _gids(nb).index("online_softmax_stats")
    nb.cells[i].source = nb.cells[i].source.replace("def online_softmax_stats(", "def online_softmax(")
    assert any("no cell defines online_softmax_stats() (the solution cell defines online_softmax())" in n
               for n in repair(nb, release))
    nb = reference_notebook(COURSE, "01_online_softmax")
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell("def online_softmax_stats(x, b):\n    return None"))
    assert any("defined in 2 cells" in n for n in repair(nb, release))


def test_align_pairs_changed_solution_cells_by_position():
    release = release_notebook(COURSE, "01_online_softmax")
    nb = reference_notebook(COURSE, "01_online_softmax")
    mapping = align(release.cells, nb.cells)
    assert all(mapping[i] == i for i in range(len(nb.cells)))


@pytest.mark.parametrize("line,flagged", [
    ("attnlab.reference.naive_attention = mine", True),
    ("import sys; sys.modules['attnlab.checks'] = fake", True),
    ("check_flash_forward = lambda *a, **k: None", True),
    ("f.__code__ = g.__code__", True),
    ("torch.logsumexp = my_lse", True),
    ("torch.Tensor.__sub__ = lambda a, b: a", True),
    ("signal.signal(signal.SIGALRM, signal.SIG_IGN)", True),
    ("import sqlite3; sqlite3.connect('../../../gradebook.db')", True),
    ("torch.backends.cuda.matmul.allow_tf32 = True", False),
    ("o = naive_attention(q, k, v)[0]  # compare with the reference", False),
    ("m == torch.maximum(m, x)", False),
    # found by the red team: an alias, text run as code, work the probe cannot see, the kernel's messages
    ("import attnlab.verify as v\nst = v._guard._STATE", True),
    ("from attnlab import checks as c\nc.assert_close = None", True),
    ("globals().update(check_online_softmax=print)", True),
    ("import codecs\nexec(codecs.decode(text, 'rot13'))", True),
    ("f = getattr(mod, '_gu' + 'ard')", True),
    ("%time import attnlab.verify as v; v._guard._STATE.names.clear()", True),
    ("%%python\nprint(1)", True),
    ("import threading", True),
    ("o = torch.from_numpy(q.numpy() @ k.numpy().T)", True),
    ("k = get_ipython().kernel; k.session.send(k.shell_stream, 'execute_reply', {})", True),
    ("sys.settrace(skip_raises)", True),
    ("frame.f_lineno = after_the_raise", True),
    ("import builtins as b\nb.exec(text)", True),
    ("ip = get_ipython()\nip.run_cell(text)", True),
    # the sixth red team (2026-12-01): private state reached past the alias tracking, frames through traceback
    ("inspect.getmodule(tolerance)._TOL[torch.float64] = 1e9", True),
    ("for i in range(n):\n    torch._C._get_dispatch_stack_at(i).violation = None", True),
    ("def f(v):\n    v._guard._STATE.attrs.clear()", True),
    ("v = (attnlab.verify,)[0]\nv._guard.drain()", True),
    ("(v := attnlab.verify)._guard.drain()", True),
    ("for c in [attnlab.checks]:\n    c._TOL.clear()", True),
    ("frames = list(traceback.walk_stack(None))", True),
    ("from torch._C import _get_dispatch_stack_at as at\nat(0).violation = None", True),
    ("import torch._C as C", True),
    ("class C:\n    def __init__(self):\n        self._cache = {}", False),
    # a maintainer review: a name spelled self or cls is no proof the object is the cell's own
    ("for self in (torch,):\n    for self in (self._C._get_dispatch_stack_at(0),):\n        self._violation = None", True),
    ("self = attnlab.verify\nself._guard._STATE.attrs.clear()", True),
    ("def f(cls):\n    return cls._guard", True),
    ("class A:\n    def f(self):\n        return self._guard\nA.f(attnlab.verify)", True),
    ("object.__setattr__(mode, '_violation', None)", True),
    ("class Acc:\n    def __init__(self):\n        self._m = 0\nacc = Acc()\nacc._m += 1", False),
    ("class F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x, s):\n        ctx._s = s\n"
     "        return x", False),
    ("q = p._replace(x=3)._asdict()", False),
    ("class A:\n    def _g(self):\n        return 1\nclass B(A):\n    def g(self):\n        return super()._g()", False),
    # the eighth red team: a method called through its class with a module as self, __getstate__
    ("class S:\n    def at(self, i):\n        return self._get_dispatch_stack_at(i)\nS.at(torch._C, 0)", True),
    ("class S:\n    def __init__(self):\n        self._get_dispatch_stack_at = None\n"
     "    def at(self, i):\n        return self._get_dispatch_stack_at(i)", True),
    ("modes = torch.is_grad_enabled.__self__", True),
    ("mode.__getstate__()['_violation'] = None", True),
    ("import traceback\ntraceback.print_exc()", False),
    ("import inspect\nprint(inspect.signature(f))", False),
    # the seventh red team: a match pattern, text paths, the interpreter's builder instance
    ("match torch:\n    case object(_C=c):\n        pass", True),
    ("import pkgutil\npkgutil.resolve_name('attnlab.verify:_guard')", True),
    ("string.Formatter().get_field('0._guard', (v,), {})", True),
    ("getattr(sys, 'modules')", True),
    ("import sys as s\ns.modules['attnlab.checks'] = None", True),
    ("for m in model.modules():\n    print(m)", False),
    ("from triton.runtime.interpreter import interpreter_builder as ib\nib.create_load = again", True),
    ("from unittest import mock", True),
    ("%matplotlib inline", False),
    ("%time m, l = online_softmax_stats(x, 16)", False),
    ("from attnlab.verify import check_online_softmax\ncheck_online_softmax(f, shape=(4, 50), block_size=16)", False),
    ("dtype = getattr(torch, 'float32')", False),
    ("fast = torch.compile(f)", False),
    # 2026-12-03: a module's class swapped, reached through a call the alias tracking cannot follow
    ("def get():\n    import attnlab\n    return attnlab\nget().__class__ = Hooked", True),
    ("for m in mods():\n    m.__class__ = Hooked", True),
    ("name = x.__class__.__name__", False),
])
def test_scan_flags_code_that_reaches_into_the_tests(line, flagged):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(line)])
    assert bool(scan(nb)) is flagged, scan(nb)


# ------------------------------------------------------------------------------------ submissions
@pytest.mark.parametrize("filename", ["Copy of 02_flash_forward.ipynb", "02_flash_forward (1).ipynb",
                                      "02_flash_forward-Copy1.ipynb", "02_flash_forward - Copy.ipynb",
                                      "02 Flash Forward.ipynb", "02_flash_forward-1.ipynb",
                                      "Copy of Copy of 02_flash_forward (2).ipynb", "02_flash_forward.ipynb.ipynb"])
def test_canonical_names(filename):
    assert canonical(filename) == "02_flash_forward"


def test_normalize_renames_only_when_the_name_is_missing(tmp_path):
    names = ["01_online_softmax", "02_flash_forward", "06_scaling_sweep"]
    (tmp_path / "01_online_softmax.ipynb").write_text("{}")
    (tmp_path / "Copy of 01_online_softmax.ipynb").write_text("old")
    old, new = tmp_path / "Copy of 02_flash_forward.ipynb", tmp_path / "02_flash_forward (1).ipynb"
    old.write_text("older")
    new.write_text("newer")
    os.utime(old, (1, 1))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "06_scaling_sweep.ipynb").write_text("nested")
    (tmp_path / "notes.ipynb").write_text("{}")
    notes = normalize_submission(tmp_path, names)
    assert (tmp_path / "01_online_softmax.ipynb").read_text() == "{}"  # never overwritten
    assert (tmp_path / "02_flash_forward.ipynb").read_text() == "newer"
    assert (tmp_path / "06_scaling_sweep.ipynb").read_text() == "nested"
    assert "the newest of 2" in notes["02_flash_forward"][0]
    assert any("looks like a copy of 01_online_softmax.ipynb" in n for n in notes[WHOLE])
    assert any("'notes.ipynb' is not one of" in n for n in notes[WHOLE])
    assert normalize_submission(tmp_path, names) == notes  # idempotent, notes kept
    assert (tmp_path / NOTES_FILE).is_file()


def test_normalize_matches_a_loosely_named_file(tmp_path):
    (tmp_path / "jdoe_02_flash_forward_final.ipynb").write_text("x")
    notes = normalize_submission(tmp_path, ["01_online_softmax", "02_flash_forward"])
    assert (tmp_path / "02_flash_forward.ipynb").exists() and "02_flash_forward" in notes


@pytest.mark.parametrize("path,layout,want", [
    ("export/jdoe_123_456_02_flash_forward.ipynb", "auto", ("jdoe-123", "02_flash_forward.ipynb")),
    ("export/jdoe_LATE_123_456_Copy of 02_flash_forward.ipynb", "canvas", ("jdoe-123", "Copy of 02_flash_forward.ipynb")),
    ("export/Ann Lee_77_assignsubmission_file_/01_online_softmax.ipynb", "auto", ("ann_lee-77", "01_online_softmax.ipynb")),
    ("export/submissions/bob/attention_kernels/01_online_softmax.ipynb", "auto", ("bob", "01_online_softmax.ipynb")),
    ("export/01_online_softmax.ipynb", "auto", None),
    ("export/bob/01_online_softmax.ipynb", "canvas", None),
])
def test_lms_layouts(path, layout, want):
    info = parse(path, layout)
    assert (None if info is None else (info["student_id"], info["file_id"])) == want


def test_slug():
    assert slug("Ann Lee-Smith (2)") == "ann_lee-smith_2"


# ------------------------------------------------------------------------------------ report
def test_failure_reason_names_the_exception():
    log = "[AutogradeApp | ERROR] Traceback (most recent call last):\n  File x\n    KeyError: 'grade_id'\n" \
          "[AutogradeApp | ERROR] Please see the the above traceback for details"
    assert failure_reason(log) == "grading failed: KeyError: 'grade_id'"


def test_report_lists_notes():
    r = NotebookResult("s", "01_online_softmax", "graded", 5, 6, cells=[CellResult("t", 0, 1, "NameError: x")],
                       notes=["submitted as 'Copy of 01_online_softmax.ipynb'"])
    text = format_report([r])
    assert "  s / 01_online_softmax: t (-1): NameError: x" in text
    assert "Grader's notes" in text and "  s / 01_online_softmax: submitted as" in text


def test_learner_text_cannot_drive_the_instructors_terminal_or_spreadsheet(tmp_path):
    """Red team 9 forged a row's points in the printed report with cursor moves in an exception's message,
    and hid everything after it with an unclosed OSC sequence."""
    from attnlab.grading.host.autograde import write_report_csv

    forged = "\x1b[G\x1b[2K\x1b[5Aforged  6/6\x9b2K\r\x1b]2;title"
    r = NotebookResult("s", "01_online_softmax", "graded", 1, 6, cells=[CellResult("t", 0, 5, "ValueError: " + forged)],
                       notes=["=HYPERLINK(\"http://x\")" + forged])
    text = format_report([r])
    assert not any(ch in text for ch in "\x1b\x9b\r\x07") and "1/6" in text and "Grader's notes" in text
    write_report_csv([r], tmp_path / "r.csv")
    row = (tmp_path / "r.csv").read_text().splitlines()[1]
    assert "\x1b" not in row and ",'=HYPERLINK" in row.replace('"', "")


# ------------------------------------------------------------------------------------ checks
def test_assert_shape_rejects_tensor_subclasses():
    class Liar(torch.Tensor):
        pass

    with pytest.raises(AssertionError, match="plain torch.Tensor, got the subclass Liar"):
        checks.assert_close(torch.zeros(3).as_subclass(Liar), torch.ones(3, dtype=torch.float64), name="o")


def test_time_limit_stops_code_that_swallows_the_alarm(monkeypatch):
    def stubborn():
        try:
            while True:
                pass
        except BaseException:  # noqa: BLE001 (what a careless learner writes)
            pass
        while True:  # ... and carries on: the repeated alarm stops it
            pass

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # an earlier test may have started CUDA
    start = time.perf_counter()
    with pytest.raises(TimeoutError) as err:
        with checks.time_limit(1.0, "stubborn"):
            stubborn()
    assert time.perf_counter() - start < 4
    # it spun on the CPU: the verdict appears when the CPU it reports is at least 90 % of the wall (the
    # figures are rounded to 0.1 s: no verdict is asserted within that of the threshold)
    wall, cpu = (float(x) for x in re.findall(r"after ([\d.]+) s, ([\d.]+) s of CPU", str(err.value))[0])
    if abs(cpu - 0.9 * wall) > 0.1:
        assert (checks.RAN_ALL_ALONG in str(err.value)) == (cpu > 0.9 * wall), str(err.value)
    assert (err.type is checks.CPUBoundTimeoutError) == (checks.RAN_ALL_ALONG in str(err.value))  # the kind, as a type


def test_a_timed_out_call_that_waited_is_not_said_to_have_run_all_along():
    """A call that was off the CPU (sleeping here; starved by other kernels in a grading run) gets no
    such verdict, so the grader grades its notebook again alone."""
    with pytest.raises(TimeoutError) as err:
        with checks.time_limit(0.3, "sleepy"):
            time.sleep(2)
    assert "s of CPU" in str(err.value) and checks.RAN_ALL_ALONG not in str(err.value), str(err.value)
    assert err.type is checks.CallTimeoutError  # the type the host reads: graded again alone


GUARD_SCRIPT = """
    import json, os, sys, tempfile, types
    import torch
    import attnlab.checks, attnlab.reference, attnlab.verify
    from attnlab.grading.kernel import guard
    assert not guard.active()
    home = tempfile.mkdtemp()
    guard.install(cwd=home)
    ns = {}
    guard.before_locked(ns)  # a read-only cell (the set-up) binds names in the notebook
    ns.update(check_online_softmax=attnlab.verify.check_online_softmax, torch=torch)
    guard.after_locked(ns)
    real = attnlab.reference.naive_attention
    attnlab.reference.naive_attention = lambda *a, **k: None
    import numpy as np
    bincount = np.bincount
    np.bincount = lambda *a, **k: np.ones(1)  # the load accounting counts reads with it (red team 9)
    attnlab.checks.assert_close = lambda *a, **k: 0.0
    attnlab.verify.check_flash_forward.__code__ = (lambda *a, **k: None).__code__
    sys.modules["attnlab.checks"] = types.ModuleType("fake")
    torch.Tensor.__sub__ = lambda a, b: a
    torch.logsumexp = None
    torch.set_grad_enabled(False)
    os.chdir("/")
    ns["check_online_softmax"] = lambda *a, **k: None
    import builtins
    ns["__builtins__"] = dict(vars(builtins), __import__=lambda *a, **k: types.ModuleType("fake"))
    class Hooked(types.ModuleType):  # a class swap: every read of the module can lie
        def __getattribute__(self, key):
            return (lambda *a, **k: 0.0) if key == "tolerance" else super().__getattribute__(key)
    attnlab.reference.__class__ = Hooked
    notes = json.loads(guard.before_locked(ns))["notes"]
    assert type(attnlab.reference) is types.ModuleType, type(attnlab.reference)
    assert any("class of module attnlab.reference" in n for n in notes), notes
    assert ns["__builtins__"] is builtins
    exec("from attnlab.checks import assert_close", ns)
    assert ns["assert_close"] is attnlab.checks.assert_close
    assert attnlab.reference.naive_attention is real
    assert np.bincount is bincount and any("numpy.bincount" in n for n in notes), notes
    assert sys.modules["attnlab.checks"] is attnlab.checks and attnlab.checks.assert_close.__name__ == "assert_close"
    assert (torch.ones(2) - torch.ones(2)).sum() == 0 and torch.logsumexp is not None and torch.is_grad_enabled()
    assert os.getcwd() == os.path.realpath(home) and ns["check_online_softmax"] is attnlab.verify.check_online_softmax
    try:
        attnlab.verify.check_flash_forward(lambda *a, **k: None, T_q=4)
        raise SystemExit("the checker's code was not restored")
    except AssertionError:
        pass
    # a learner function that patches the reference while it runs: undone before the comparison
    def sneaky(q, k, v, causal=False, block_q=16, block_k=16):
        attnlab.verify.naive_attention = lambda q, k, v, causal=False, scale=None: (q * 0, q[..., 0] * 0)
        return q * 0, q[..., 0] * 0
    try:
        attnlab.verify.check_flash_forward(sneaky, T_q=8)
        raise SystemExit("the sneaky solution passed")
    except AssertionError:
        pass
    notes += json.loads(guard.drain())
    print(json.dumps(notes))
"""


def test_guard_restores_what_learner_code_replaced():
    proc = _run(GUARD_SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = " | ".join(json.loads(proc.stdout.strip().splitlines()[-1]))
    for text in ("attnlab.reference.naive_attention", "sys.modules['attnlab.checks']", "torch.Tensor.__sub__",
                 "torch.logsumexp", "gradients", "working directory", "'check_online_softmax'",
                 "the code of attnlab.verify.check_flash_forward", "attnlab.verify.naive_attention",
                 "the notebook's __builtins__"):
        assert text in notes, text



def test_guard_restores_what_reads_a_predictions_answer():
    """A solution cell that rebinds what reads a prediction's answer (attnlab.checking.answers, under
    attnlab.checks.assert_number and the variants' check) to accept anything has it undone."""
    proc = _run("""
    import json
    from attnlab.grading.kernel import guard
    guard.install(cwd=__import__("tempfile").mkdtemp())
    from attnlab.checks import assert_number
    from attnlab.checking import answers
    answers.real_number = lambda value, name: 512.0
    notes = json.loads(guard.before_locked({}))["notes"]
    try:
        assert_number("512", 512, name="x")
        raise SystemExit("a string passed as a number")
    except AssertionError:
        pass
    print(json.dumps(notes))
""")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "attnlab.checking.answers.real_number" in proc.stdout.strip().splitlines()[-1], proc.stdout


#: The course's modules a checker loads, printed by a fresh interpreter (other tests import more).
_CHECKER_MODULES = (
    "import json, sys\n"
    "import attnlab.checks, attnlab.verify, attnlab.verify_backward, attnlab.verify_decode, attnlab.verify_tuning\n"
    "print(json.dumps(sorted(n for n in sys.modules if n.startswith('attnlab') and not n.startswith('attnlab.grading'))))"
)


def test_the_guard_snapshots_every_module_the_checkers_load():
    """A module the checks call into that the guard does not snapshot is one a solution cell can rebind
    unseen: attnlab.checking.work_models was one (a cell could have rebound the FLOPs rule of the work ledger)."""
    from attnlab.grading.kernel import guard

    proc = subprocess.run([sys.executable, "-c", _CHECKER_MODULES], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "attnlab.checking.work_models" in loaded and "attnlab.verify" in loaded, loaded  # the measure sees them
    assert [m for m in loaded if m not in guard.SNAPSHOT_MODULES] == []


def test_guard_is_inert_outside_grading():
    proc = _run("""
        import attnlab.verify, attnlab.reference
        attnlab.verify.naive_attention = 'patched by the learner, on purpose'
        attnlab.verify.call_learner(lambda: None, 'noop')
        assert attnlab.verify.naive_attention == 'patched by the learner, on purpose'
    """)
    assert proc.returncode == 0, proc.stderr


TRITON_SCRIPT = """
    import time
    from attnlab import init
    init(verbose=False)
    import triton, triton.language as tl
    from attnlab.verify import check_softmax_kernel

    @triton.jit
    def hangs(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
        row = tl.program_id(0)
        i = 0
        while i >= 0:
            i += 1

    @triton.jit
    def works(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK_SIZE)
        mask = offs < n_cols
        x = tl.load(input_ptr + row * input_row_stride + offs, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(output_ptr + row * output_row_stride + offs, num / tl.sum(num, axis=0), mask=mask)

    for attempt in range(2):
        start = time.perf_counter()
        try:
            check_softmax_kernel(hangs, n_rows=2, n_cols=37)
        except TimeoutError as exc:
            print(f"{time.perf_counter() - start:.2f} {exc}")
    check_softmax_kernel(works, n_rows=2, n_cols=37)  # another kernel is still checked
    print("works")
"""


def test_a_hanging_triton_kernel_under_the_interpreter_times_out(tmp_path):
    # from a file: a kernel is graded rebuilt from its source (attnlab.kernel_source), and `python -c` has none
    script = tmp_path / "hangs.py"
    script.write_text(textwrap.dedent(TRITON_SCRIPT))
    proc = _run(f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))",
                env={"ATTNLAB_CALL_LIMIT_S": "1", "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second, last = [ln for ln in proc.stdout.strip().splitlines() if not ln.startswith("[")][-3:]
    assert "did not finish within 1 s" in first and float(first.split()[0]) < 5
    assert "not run again" in second and float(second.split()[0]) < 0.5
    assert last == "works"


# ------------------------------------------------------------------------------------ GradingExecute
def _execute(cells, tmp_path, **config):
    """Run ``cells`` (source, is_test) through GradingExecute as nbgrader would, without a gradebook."""
    from attnlab.grading.worker.execute import GradingExecute

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    for i, (source, test) in enumerate(cells):
        meta = {"nbgrader": {"grade_id": f"t{i}", "grade": True, "locked": True, "solution": False, "points": 1,
                             "schema_version": 3}} if test else {}
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata=meta))
    ep = GradingExecute(**{"timeout": 20, "prewarm": False, "guard": False, **config})
    nb, _ = ep.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb


def _enames(nb):
    return [[o.get("ename") for o in c.outputs if o.output_type == "error"] for c in nb.cells if c.cell_type == "code"]


def test_a_checks_note_is_reported_as_told_not_as_a_change_the_grader_undid(tmp_path):
    """attnlab.core.review.note (the variants' "answers for the release's shapes" reminder) reaches the
    grader typed, so its notes list it with the cell and the cell's output does not call it a repair."""
    nb = _execute([("from attnlab.core.review import note, flag\nnote('your answers count')\nflag('look here')",
                    True)], tmp_path, guard=True)
    notes = notes_of(nb.metadata["attnlab"]["notes"])
    assert [(n.kind, n.text) for n in notes] == [
        (Kind.REVIEW, "needs review: look here (cell 't0')"), (Kind.INFO, "your answers count (cell 't0')")]
    cell = [c for c in nb.cells if c.cell_type == "code"][0]
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "[grader] your answers count" in text and "undid" not in text, text


def test_dead_kernel_restart_keeps_the_cells_around_it(tmp_path):
    nb = _execute([("x = 1", False), ("import sys; print('a warning', file=sys.stderr)", True),
                   ("import os; os._exit(3)", False), ("print('x' * 5000)\nassert x == 1", True)],
                  tmp_path, max_restarts=1, max_output_chars=1000)
    assert nb.cells[0].cell_type == "markdown" and "Grader's notes" in nb.cells[0].source
    assert _enames(nb) == [[], [], ["KernelDied"], []]
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert [o.name for o in cells[1].outputs] == ["stdout"]  # a warning in a test cell is not a failure
    assert "Output truncated" in "".join(o.get("text", "") for o in cells[3].outputs)
    assert sum(len(o.get("text", "")) for o in cells[3].outputs) < 1500
    assert any("kernel died" in n.text for n in notes_of(nb.metadata["attnlab"]["notes"]))


def test_out_of_restarts_or_time_the_remaining_cells_are_marked_not_run(tmp_path):
    nb = _execute([("x = 1", True), ("import os; os._exit(3)", False), ("x = 2", True)], tmp_path, max_restarts=0)
    assert _enames(nb) == [[], ["KernelDied"], ["NotRun"]]  # a test cell that did not run scores 0
    nb = _execute([("x = 1", True), ("x = 2", True)], tmp_path, notebook_budget=0)
    assert _enames(nb) == [["NotRun"], ["NotRun"]]
    assert any("budget" in n.text for n in notes_of(nb.metadata["attnlab"]["notes"]))


_SPIN = """import time
cpu, wall = time.thread_time(), time.perf_counter()
try:
    while True:
        pass
except KeyboardInterrupt:
    print(f"share {(time.thread_time() - cpu) / (time.perf_counter() - wall):.3f}")
    raise
"""


def test_a_cell_that_computed_until_its_limit_is_not_graded_again_but_one_that_waited_is(tmp_path):
    """A top-level endless loop that had the CPU all along says so (read from /proc by the grader), and
    autograde does not grade its notebook again alone; a cell that waited (sleep: starved looks the
    same) may have been slowed by other workers, and is."""
    from attnlab.checks import RAN_ALL_ALONG

    nb = _execute([(_SPIN, False), ("import time; time.sleep(60)", False), ("x = 1", True)], tmp_path, timeout=3)
    spin, sleep, _ = [c for c in nb.cells if c.cell_type == "code"]
    assert _enames(nb) == [["KeyboardInterrupt", "CellTimeoutError"], ["KeyboardInterrupt", "CellTimeoutError"], []]
    share = float(next(o.text for o in spin.outputs if o.output_type == "stream").split()[1])
    flagged = RAN_ALL_ALONG in spin.outputs[-1].evalue
    if share > 0.97 or share < 0.8:  # near the 90 % line the kernel's and the grader's clocks may disagree
        assert flagged == (share > 0.97), (share, spin.outputs[-1].evalue)
    assert sleep.outputs[-1].ename == "CellTimeoutError" and RAN_ALL_ALONG not in sleep.outputs[-1].evalue
    notes = [n for n in notes_of(nb.metadata["attnlab"]["notes"]) if "ran past" in n.text]
    assert [RAN_ALL_ALONG in n.text for n in notes] == [flagged, False], notes
    # the kind the host decides by: the spinning cell's note is not contended, the sleeping one's is
    assert [n.kind for n in notes] == [Kind.INFO if flagged else Kind.CONTENDED, Kind.CONTENDED]


# ------------------------------------------------------------------------------------ sandbox
needs_bwrap = pytest.mark.skipif(not __import__("attnlab.grading.sandbox", fromlist=["_"]).check()[0] and
                                 os.environ.get("CI") != "true",
                                 reason="bubblewrap is not installed or cannot start here (make install installs it)")

_PROBE = r"""
import json, os, socket, sys
out = {"pid": os.getpid(), "cwd": os.getcwd(), "path": sys.path, "home": os.environ["HOME"], "wrote": []}
for p in [os.path.join(os.getcwd(), "ok"), os.path.join(sys.argv[1], "x"), "/tmp/x", sys.prefix + "/x",
          os.path.join(os.path.dirname(os.path.dirname(sys.argv[2])), "x")]:
    try:
        open(p, "w").write("1")
        out["wrote"].append(p)
    except OSError:
        pass
out["course"] = os.path.exists(os.path.join(sys.argv[1], "gradebook.db"))
out["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
    out["net"] = True
except OSError as exc:
    out["net"] = str(exc)
import attnlab
out["attnlab"] = attnlab.__file__
# root's capabilities would let the kernel mount / again, without the hiding tmpfs, and write to it
out["capabilities"] = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")][0]
os.makedirs("again", exist_ok=True)
import subprocess
out["mounted"] = subprocess.run(["mount", "--bind", "/", "again"], capture_output=True).returncode == 0
# uid 0 needs no capability for a sysctl: core_pattern would run a program as root outside the sandbox
out["sysctl"] = []
for p in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger"):
    try:
        os.close(os.open(p, os.O_WRONLY))  # opened, never written
        out["sysctl"].append(p)
    except OSError:
        pass
print(json.dumps(out))
"""


@needs_bwrap
def test_sandbox_sees_one_writable_folder_and_nothing_of_the_course(tmp_path, monkeypatch):
    """What the kernel's command runs in: the course folder (the working folder of the grader) is
    hidden, only the scratch folder is writable, its own PID namespace, no network, cwd not on sys.path,
    no capabilities (a red team remounted / read-write from a kernel of a grader running as root)."""
    import attnlab
    from attnlab.grading import sandbox

    course, scratch = tmp_path / "course", tmp_path / "scratch"
    course.mkdir()
    scratch.mkdir()
    (course / "gradebook.db").write_text("secret")
    monkeypatch.chdir(course)
    cmd = sandbox.wrap([sys.executable, "-c", _PROBE, str(course), attnlab.__file__], str(scratch), ipc_dir=None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["wrote"] == [str(scratch / "ok")]
    assert not out["course"] and out["procs"] == [1, 2] and out["pid"] == 2
    assert out["net"] is not True
    assert str(scratch) not in out["path"] and "" not in out["path"]
    assert out["home"] == str(scratch) and out["attnlab"] == attnlab.__file__
    assert int(out["capabilities"], 16) == 0 and not out["mounted"]  # also when the grader is root
    assert out["sysctl"] == []
    assert not (tmp_path / "x").exists() and (course / "gradebook.db").read_text() == "secret"


@needs_bwrap
def test_other_kernels_scratch_folders_stay_hidden_when_tmpdir_is_not_tmp(monkeypatch, tmp_path):
    """Scratch folders live in the grader's temporary folder; with TMPDIR outside /tmp it is hidden too."""
    import shutil
    import tempfile

    from attnlab.grading import sandbox

    from .conftest import ROOT

    tmpdir = tempfile.mkdtemp(prefix=".tmpdir-test-", dir=ROOT)  # not under /tmp, /home or the course
    monkeypatch.chdir(tmp_path)  # the course folder (hidden anyway)
    try:
        monkeypatch.setattr(tempfile, "tempdir", tmpdir)
        other, mine = (tempfile.mkdtemp(prefix="attnlab-run-") for _ in range(2))
        open(os.path.join(other, "answers.py"), "w").write("secret")
        probe = f"import os; print(sorted(os.listdir({tmpdir!r})))"
        proc = subprocess.run(sandbox.wrap([sys.executable, "-c", probe], mine, ipc_dir=None),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == str([os.path.basename(mine)])  # its own scratch folder only
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_autograde_refuses_without_the_sandbox_unless_told(monkeypatch):
    from attnlab.grading import sandbox

    monkeypatch.setattr(sandbox, "check", lambda: (False, "bwrap (bubblewrap) is not installed"))
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    with pytest.raises(sandbox.SandboxUnavailable, match="--unsafe-no-sandbox.*gradebook.db"):
        sandbox.require(False)
    assert "WITHOUT the sandbox" in sandbox.require(True)
    assert os.environ[sandbox.UNSAFE_ENV] == "1"  # read by nbgrader_config.py in the worker


_FAKE_WORKER = r"""
import json, os, sys
out = os.fdopen(os.dup(1), "w")
for job in (line.strip() for line in sys.stdin):  # jobs come one a line on stdin (argv ends in "-")
    if job.endswith("die-before"):
        os._exit(9)
    out.write(json.dumps({"start": job}) + "\n"); out.flush()
    if job.endswith("die-during"):
        os._exit(9)
    out.write(json.dumps({"done": job, "success": True, "log": ""}) + "\n"); out.flush()
"""


def test_a_dying_worker_never_loses_a_job_silently(monkeypatch, tmp_path):
    """Workers that die while grading or between notebooks: every job still gets an outcome."""
    from attnlab.grading.host import autograde

    real = subprocess.Popen
    monkeypatch.setattr(autograde.subprocess, "Popen",
                        lambda cmd, **kw: real([sys.executable, "-c", _FAKE_WORKER, *cmd[1:]], **kw))
    jobs = ["s/ok1", "s/die-during", "s/ok2", "s/die-before", "s/ok3"]
    done = []
    outcomes = autograde.run_worker(Course(tmp_path), jobs, 30, on_done=lambda j, o: done.append(j))
    assert {j: o[0] for j, o in outcomes.items()} == {"s/ok1": "ok", "s/die-during": "failed", "s/ok2": "ok",
                                                      "s/die-before": "failed", "s/ok3": "failed"}
    assert sorted(done) == sorted(jobs)
    assert "exited" in outcomes["s/die-before"][1] and "died" in outcomes["s/die-during"][1]
    assert autograde.failure_reason(outcomes["s/die-during"][1]).startswith("the grading worker process died")


def test_report_lists_needs_review_apart(tmp_path):
    from attnlab.grading.host.autograde import not_graded, write_report_csv

    flagged = NotebookResult("s", "02_flash_forward", "graded", 10, 10, notes=["restored x"],
                             needs_review=["needs review: a dispatcher override could not be undone"])
    failed = NotebookResult("t", "02_flash_forward", "failed", 0, 10, reason="the grading process died")
    text = format_report([flagged, failed])
    section = text[text.index("Needs review"):text.index("Grader's notes")]
    assert "  s / 02_flash_forward: needs review: a dispatcher override" in section
    assert "restored x" not in section and "NOT GRADED: 1 notebook(s)" in text and "t/02_flash_forward" in text
    assert not_graded([flagged, failed]) == [failed]
    write_report_csv([flagged], tmp_path / "r.csv")
    row = list(__import__("csv").DictReader(open(tmp_path / "r.csv")))[0]
    assert row["needs_review"].startswith("needs review: ") and row["notes"] == "restored x"


@needs_bwrap
def test_spare_kernel_is_sandboxed_and_starts_clean(tmp_path):
    """A notebook that leaves files, module state and a daemon behind; the next notebook runs in the
    spare kernel, which saw none of it; a check's needs-review note is listed apart."""
    from attnlab.grading import sandbox
    from attnlab.grading.worker import execute

    def notebook(cells):
        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                               "language": "python"}})
        for i, (source, test) in enumerate(cells):
            meta = {"nbgrader": {"grade_id": f"t{i}", "grade": True, "locked": True, "solution": False,
                                 "points": 1, "schema_version": 3}} if test else {}
            nb.cells.append(nbformat.v4.new_code_cell(source, metadata=meta))
        return nb

    first = notebook([("import attnlab, os, subprocess, sys\nattnlab.LEAK = 1\nopen('left.txt', 'w').write('x')\n"
                       "open(os.path.expanduser('~/home.txt'), 'w').write('x')\n"
                       "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # spare-test-daemon'],"
                       " start_new_session=True)", False),
                      ("import attnlab.core.review\nattnlab.core.review.flag('an override could not be undone')", True)])
    second = notebook([("import attnlab, os, sys\nassert not hasattr(attnlab, 'LEAK')\n"
                        "assert not os.path.exists('left.txt') and not os.path.exists(os.path.expanduser('~/home.txt'))\n"
                        "assert os.getpid() <= 4 and os.getppid() == 1, (os.getpid(), os.getppid())\nassert os.getcwd() not in sys.path", True)])
    ep = execute.GradingExecute(timeout=60, prewarm=True, guard=True)
    try:
        nb1, _ = ep.preprocess(first, {"metadata": {"path": str(tmp_path)}})
        assert execute.spare() is not None and isinstance(execute.spare(), sandbox.SandboxedKernelManager)
        spare_scratch = execute.spare().scratch
        nb2, _ = execute.GradingExecute(timeout=60, prewarm=False, guard=True).preprocess(
            second, {"metadata": {"path": str(tmp_path)}})
    finally:
        execute.drop_spare()
    assert _enames(nb1) == [[], []] and _enames(nb2) == [[]], (_enames(nb1), nb2.cells[-1].outputs)
    assert nb1.metadata["attnlab"]["notes"] == ["needs review: an override could not be undone (cell 't1')"]
    assert "**Needs review**" in nb1.cells[0].source
    assert not os.path.exists(spare_scratch) and os.listdir(tmp_path) == []
    assert _processes_with(b"spare-test-daemon") == []


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="a grader that is not root runs kernels as its own account")
def test_a_root_graders_kernel_runs_as_an_account_of_its_own(tmp_path, monkeypatch):
    """Graded by root, learner code runs as a uid of its own, with no capability: a root-only file the
    sandbox still shows (as /etc/shadow is) cannot be read into the feedback, the copied submission
    files and the scratch folder are its own, a link in the submission is not followed, the account
    has a name (pwd, USER), and RLIMIT_NPROC binds its tasks; ATTNLAB_KERNEL_ACCOUNT=root keeps uid 0
    (and can read it)."""
    from attnlab.grading.worker import execute
    from attnlab.grading import sandbox
    from attnlab.grading.sandbox import bwrap

    secret = tmp_path / "visible" / "root-only.txt"  # bound in read-only, as /etc/shadow is visible
    secret.parent.mkdir()
    secret.write_text("root's secret")
    os.chmod(secret, 0o600)
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "03_flash_backward.ipynb").write_text("{}")
    os.chmod(folder / "03_flash_backward.ipynb", 0o600)  # as an LMS archive may leave it
    os.symlink(secret, folder / "link.ipynb")
    monkeypatch.setattr(bwrap, "needed_read_only", lambda real=bwrap.needed_read_only: [*real(), str(secret)])
    probe = ("import os, pwd, resource, json\n"
             "assert os.getuid() == 0 or pwd.getpwuid(os.getuid()).pw_name == os.environ['USER'] == 'attnlab-kernel'\n"
             f"try:\n    got = open({str(secret)!r}).read()\nexcept OSError as exc:\n    got = type(exc).__name__\n"
             "caps = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith(('CapEff', 'CapPrm'))]\n"
             "print(json.dumps([os.getuid(), got, caps, open('03_flash_backward.ipynb').read(), "
             "os.path.exists('link.ipynb'), os.stat('.').st_uid, resource.getrlimit(resource.RLIMIT_NPROC)[0]]))")
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells.append(nbformat.v4.new_code_cell(probe))

    def run():
        out, _ = execute.GradingExecute(timeout=60, prewarm=False, guard=True, max_tasks=300).preprocess(
            nbformat.from_dict(json.loads(json.dumps(nb))),
            {"unique_key": "03_flash_backward", "metadata": {"path": str(folder)}})
        return json.loads(out.cells[-1].outputs[0]["text"])

    uid, got, caps, copied, link, owner, nproc = run()
    assert uid in sandbox.KERNEL_IDS and owner == uid and got == "PermissionError", (uid, got)
    assert caps == ["0000000000000000"] * 2 and copied == "{}" and not link and nproc == 300
    monkeypatch.setenv(sandbox.KERNEL_ACCOUNT_ENV, "root")
    uid, got, *_ = run()
    assert uid == 0 and got == "root's secret"


def test_a_notebook_without_gpu_cases_runs_with_the_gpu_hidden_and_the_spare_follows(tmp_path, monkeypatch):
    """03's kernel has no CUDA device; the spare started meanwhile is 04's kind (GPU shown) and is
    taken by 04; the one started during 04 is the next student's 01 kind (GPU hidden)."""
    from attnlab.grading.worker import execute

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # what a GPU host's worker passes on (none here)
    monkeypatch.delenv("ATTNLAB_DEVICE", raising=False)

    def notebook(source):
        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                               "language": "python"}})
        meta = {"nbgrader": {"grade_id": "t", "grade": True, "locked": True, "solution": False, "points": 1,
                             "schema_version": 3}}
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata=meta))
        return nb

    folder = tmp_path / "submission"
    folder.mkdir()
    for name in ("03_flash_backward", "04_triton_softmax"):
        (folder / f"{name}.ipynb").write_text("{}")
    hidden = notebook("import os\nassert os.environ['CUDA_VISIBLE_DEVICES'] == '' and os.environ['ATTNLAB_DEVICE'] == 'cpu'")
    shown = notebook("import os\nassert os.environ.get('CUDA_VISIBLE_DEVICES') != '' and "
                     "os.environ.get('ATTNLAB_DEVICE') != 'cpu'\nprint(os.getcwd())")
    try:
        nb1, _ = execute.GradingExecute(timeout=60, prewarm=True).preprocess(
            hidden, {"unique_key": "03_flash_backward", "metadata": {"path": str(folder)}})
        spare = execute.spare()
        assert spare is not None and spare.gpu is True and spare.attnlab_gpu is True
        nb2, _ = execute.GradingExecute(timeout=60, prewarm=True).preprocess(
            shown, {"unique_key": "04_triton_softmax", "metadata": {"path": str(folder)}})
        assert execute.spare() is not spare and execute.spare().gpu is False  # taken; the next is 03's kind
    finally:
        execute.drop_spare()
    assert _enames(nb1) == [[]] and _enames(nb2) == [[]], (nb1.cells[-1].outputs, nb2.cells[-1].outputs)
    assert nb2.cells[-1].outputs[0]["text"].strip() == spare.scratch  # 04 ran in the spare


def _processes_with(text: bytes) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and text in open(f"/proc/{p}/cmdline", "rb").read():
                found.append(int(p))
        except OSError:  # ended meanwhile
            pass
    return found


def test_doctor_reports_the_sandbox(monkeypatch):
    from attnlab.tools import doctor
    from attnlab.grading import sandbox

    monkeypatch.setattr(sandbox, "check", lambda: (True, "bubblewrap 0.8.0 at /usr/bin/bwrap"))
    assert doctor.check_sandbox().status == doctor.OK
    monkeypatch.setattr(sandbox, "check", lambda: (False, "bwrap (bubblewrap) is not installed"))
    check = doctor.check_sandbox()
    assert check.status == doctor.WARN and "apt-get install bubblewrap" in check.advice
    assert "--unsafe-no-sandbox" in check.advice


def test_kernels_and_scratch_folders_of_a_killed_worker_are_cleaned_up(tmp_path):
    import tempfile

    from attnlab.grading.host.autograde import kill_kernels

    scratch = tempfile.mkdtemp(prefix="attnlab-run-")
    keep = tmp_path / "not-a-scratch-folder"
    keep.mkdir()
    from attnlab.grading.sandbox.proctree import process_start

    sleeper, bystander = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ipykernel"],
                                           start_new_session=True) for _ in range(2))
    try:
        for proc in (sleeper, bystander):
            while b"ipykernel" not in open(f"/proc/{proc.pid}/cmdline", "rb").read():  # until exec'd
                time.sleep(0.05)
        pidfile = tmp_path / "pids"
        # the bystander took the pid of a kernel that started at another time (a reused pid)
        stale = int(process_start(bystander.pid)) - 1
        pidfile.write_text(f"{sleeper.pid}:{process_start(sleeper.pid)} {scratch}\n"
                           f"{bystander.pid}:{stale}\n4194999:1 {keep}\n")
        kill_kernels(pidfile)
        assert sleeper.wait(timeout=10) == -9
        assert bystander.poll() is None, "a process that reused a kernel's pid was killed"
        assert not os.path.exists(scratch) and keep.exists()
    finally:
        for proc in (sleeper, bystander):
            proc.kill()
            proc.wait()


def test_kill_kernels_ignores_blank_garbage_and_non_positive_pids_and_escaping_folders(tmp_path, monkeypatch):
    import tempfile

    from attnlab.grading.host import autograde
    from attnlab.grading.sandbox import proctree

    killed = []
    monkeypatch.setattr(os, "killpg", lambda pid, sig: killed.append(pid))
    monkeypatch.setattr(proctree, "process_start", lambda pid: "7")  # every pid looks like the kernel
    outside = tmp_path / "outside"
    outside.mkdir()
    escaping = os.path.join(tempfile.gettempdir(), "attnlab-x", "..", os.path.relpath(outside, tempfile.gettempdir()))
    pidfile = tmp_path / "pids"
    pidfile.write_bytes(b"\n   \n0:7\n-1:7\nabc:7\n12\n\xff\xfe:7\n" + f"5:7 {escaping}\n".encode())
    autograde.kill_kernels(pidfile)
    assert killed == [5]
    assert outside.exists()


# ------------------------------------------------------------------------------------ learner HTML
@pytest.mark.parametrize("answer,cleaned", [
    ("It is exact: $e^{m - m'} \\le 1$, **always**, `x < y`\n\n| a | b |\n|---|---|\n| 1 | 2 |", False),
    ("## Why\n\n> as shown\n\n1. one\n2. two\n\n![fig](https://example.com/a.png) line<br>break", False),
    ("<img src=x onerror=\"fetch('/formgrader/api/grades')\">", True),
    ("[details](javascript:fetch('/api/contents'))", True),
    ("fine <script>fetch('/api/contents')</script>", True),
])
def test_written_answers_with_script_are_graded_as_a_cleaned_copy(answer, cleaned):
    from attnlab.grading.worker.untrusted_html import clean_markdown

    out = clean_markdown(answer)
    assert (out is not None) is cleaned, out
    if cleaned:
        assert not any(s in out for s in ("onerror", "javascript:", "<script")), out


def test_outputs_that_could_run_script_are_dropped_or_cleaned():
    from attnlab.grading.worker.untrusted_html import clean_data

    png = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
    assert clean_data(png) == (png, False)
    data, changed = clean_data({"text/html": "<b>x</b><script>f()</script>", "text/plain": "x",
                                "application/javascript": "f()", "image/svg+xml": "<svg onload='f()'/>"})
    assert changed and data == {"text/plain": "x"}
    data, changed = clean_data({"text/html": "<table><tr><td onclick='f()'>1</td></tr></table>"})
    assert changed and "onclick" not in data["text/html"] and "<td>1</td>" in data["text/html"]


def _figure(metadata: dict):
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    out = new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}, metadata=metadata)
    return new_notebook(cells=[new_code_cell("plot()", outputs=[out])])


@pytest.mark.parametrize("metadata", [
    {"image/png": {"width": "1 onerror=alert(1)"}},
    {"image/png": {"height": "2 onload=alert(1)", "width": 3}},
    {"width": "1 onerror=alert(1)"},  # nbconvert's get_metadata falls back to the top level
])
def test_image_metadata_cannot_add_attributes_in_formgrader(metadata):
    """nbconvert's classic template writes width={{ width }} unquoted: metadata must not carry markup."""
    from attnlab.grading.worker.untrusted_html import clean_outputs

    from .formgrade import event_attributes, formgrade_html

    nb = _figure(metadata)
    assert event_attributes(formgrade_html(nb)), "the formgrade render no longer shows this injection"
    assert clean_outputs(nb) == [0]  # flagged
    assert event_attributes(formgrade_html(nb)) == []


def test_honest_figure_metadata_is_kept_and_not_flagged():
    from attnlab.grading.worker.untrusted_html import clean_outputs

    from .formgrade import formgrade_html

    nb = _figure({"image/png": {"width": 567, "height": 413.0, "alt": "loss curve"}, "needs_background": "light",
                  "filenames": {"image/png": "x.png"}})
    assert clean_outputs(nb) == []
    assert nb.cells[0].outputs[0].metadata == {"image/png": {"width": 567, "height": 413, "alt": "loss curve"}}
    html = formgrade_html(nb)
    assert 'width="567"' in html or "width=567" in html
    assert "x.png" not in html


def test_learner_html_cannot_take_over_formgraders_score_boxes():
    """formgrade.js finds a cell's score box by ``$("#" + grade_id)``: an output, a raw-HTML answer or a
    Markdown heading (its id is its text) with that id, before the box, would take the lookup over."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    from attnlab.grading.worker.repair import clean_answers
    from attnlab.grading.worker.untrusted_html import clean_outputs

    from .formgrade import first_with_id, formgrade_html

    graded = {"nbgrader": {"grade_id": "answer-fp8", "grade": True, "solution": True, "points": 1,
                           "schema_version": 3}}
    out = new_output("display_data", data={"text/html": '<div id="answer-fp8-comment">x</div>'})
    nb = new_notebook(cells=[new_markdown_cell("## answer-fp8\nmy notes"),
                             new_markdown_cell('<span id="answer-fp8_extra_credit">x</span>'),
                             new_code_cell("x", outputs=[out]),
                             new_markdown_cell("FP8 halves the bytes of Q and K.", metadata=graded)])
    html = formgrade_html(nb)
    assert first_with_id(html, "answer-fp8") == "h2", "the formgrade render no longer shows this takeover"
    assert first_with_id(html, "answer-fp8_extra_credit") == "span"
    notes: list[str] = []
    clean_answers(nb, notes)
    assert clean_outputs(nb) == []  # a dropped id alone is no script: not flagged as such
    html = formgrade_html(nb)
    assert (first_with_id(html, "answer-fp8"), first_with_id(html, "answer-fp8_extra_credit"),
            first_with_id(html, "answer-fp8-comment")) == ("input", "input", "textarea")
    assert len(notes) == 2 and all(n.startswith("needs review: ") for n in notes)
    assert "my notes" in html and ">answer-fp8<" in html  # the learner's text is all still there
    honest = new_notebook(cells=[new_markdown_cell("## My answer\nFP8 halves the bytes."), nb.cells[-1]])
    clean_answers(honest, notes := [])
    assert notes == [] and honest.cells[0].source == "## My answer\nFP8 halves the bytes."


@pytest.mark.parametrize("cell", [
    ("markdown", "<script>\n\n## answer-fp8\n\n[click](javascript:alert(document.domain))\n</script>"),
    ("markdown", "<textarea>\n\nanswer-fp8\n==========\n\n</textarea>"),
    ("raw", '<span id="answer-fp8">x</span>'),
    ("markdown", "## answer-gone-comment\nthe comment box of a cell the learner deleted"),
    ("markdown", '<span class="comment">x</span>'),
    ("markdown", "[see figure](files/javascript:alert(document.domain))"),  # the templates strip files/
    ("markdown", '<a href="files/&#106;avascript:alert(1)">x</a>'),
    ("markdown", "![shot](attachment:missing.png)"),  # nbconvert cannot render it: shown as typed
    ("locked", '<img src=x onerror="alert(1)">'),  # read-only by its own metadata, no release cell behind it
])
def test_cleaned_answers_stay_clean_when_formgrader_renders_them_again(cell):
    """A cleaned answer is Markdown again: text a <script> or <textarea> block hid from the first
    rendering must not become a heading or a live link in the second. Raw cells, the boxes of a cell
    the learner deleted (from the release), and formgrader's classes are covered too."""
    from nbformat.v4 import new_markdown_cell, new_notebook, new_raw_cell

    from attnlab.grading.worker.repair import clean_answers

    from .formgrade import event_attributes, first_with_id, formgrade_html

    graded = {"nbgrader": {"grade_id": "answer-fp8", "grade": True, "solution": True, "points": 1,
                           "schema_version": 3}}
    kind, source = cell
    learner = (new_raw_cell if kind == "raw" else new_markdown_cell)(source)
    if kind == "locked":
        learner.metadata["nbgrader"] = {"locked": True}
    nb = new_notebook(cells=[learner, new_markdown_cell("FP8 halves the bytes.", metadata=graded)])
    release = new_notebook(cells=[*nb.cells, new_markdown_cell("x", metadata={"nbgrader": {
        "grade_id": "answer-gone", "grade": True, "solution": True, "points": 1, "schema_version": 3}})])
    clean_answers(nb, notes := [], release)
    html = formgrade_html(nb)
    assert notes and all(n.startswith("needs review: ") for n in notes)
    assert first_with_id(html, "answer-fp8") in ("input", None) and first_with_id(html, "answer-gone-comment") is None
    assert event_attributes(html) == []
    assert 'class="comment"' not in html.split('id="answer-fp8"')[0]  # none before the real box


def test_honest_attachments_stay_and_tags_cannot_name_formgraders_classes():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from attnlab.grading.worker.repair import clean_answers

    from .formgrade import formgrade_html

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    answer = new_markdown_cell("My figure: ![roofline](attachment:r.png)", attachments={"r.png": {"image/png": png}})
    code = new_code_cell("1", metadata={"tags": ["x tabbable", "score", "keep-me"]})
    nb = new_notebook(cells=[answer, code])
    clean_answers(nb, notes := [])
    assert answer.source == "My figure: ![roofline](attachment:r.png)"  # an honest answer stays as written
    assert code.metadata["tags"] == ["keep-me"] and len(notes) == 1 and notes[0].startswith("needs review: ")
    html = formgrade_html(nb)
    assert "data:image/png;base64," + png in html
    assert "celltag_keep-me" in html and "celltag_x" not in html and "celltag_score" not in html


def test_outputs_rewritten_behind_the_output_hook_are_cleaned():
    """update_display_data replaces an earlier output's data and metadata inside nbclient, without
    the executor's output hook: the final pass cleans what it left."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from attnlab.grading.worker.untrusted_html import clean_outputs

    from .formgrade import event_attributes, formgrade_html

    out = new_output("display_data", data={"text/html": "<b>ok</b><img src=x onerror=\"alert(1)\">"})
    nb = new_notebook(cells=[new_code_cell("x", outputs=[out]), new_code_cell("y")])
    assert event_attributes(formgrade_html(nb))
    assert clean_outputs(nb) == [0]
    assert event_attributes(formgrade_html(nb)) == [] and "<b>ok</b>" in formgrade_html(nb)


def test_sandbox_check_says_when_only_the_kernel_account_cannot_start(monkeypatch):
    """A root grader whose course lies in a folder only root may enter: the check names the account and
    the two ways out, instead of a bare bwrap error."""
    from attnlab.grading import sandbox

    monkeypatch.setattr(sandbox, "kernel_account", lambda: sandbox.KERNEL_IDS.start)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox, "starts_as", lambda account: "" if account is None else "Permission denied")
    sandbox.check.cache_clear()
    try:
        ok, detail = sandbox.check()
    finally:
        sandbox.check.cache_clear()
    assert not ok and "account of their own" in detail and "chmod -R o+rX" in detail
    assert f"{sandbox.KERNEL_ACCOUNT_ENV}=root" in detail and "Permission denied" in detail


def test_links_and_special_files_in_a_submission_are_found(tmp_path):
    """Links (to files or folders), FIFOs and a linked assignment folder are named; plain files and
    folders are not; a linked folder is not walked into."""
    from attnlab.grading.host.submissions import not_plain_files

    folder = tmp_path / "alice" / "attention_kernels"
    (folder / "sub").mkdir(parents=True)
    (folder / "01_online_softmax.ipynb").write_text("{}")
    (folder / "sub" / "notes.md").write_text("x")
    assert not_plain_files(folder) == []
    (folder / "sub" / "answers.ipynb").symlink_to("/etc/shadow")
    (folder / "course").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(folder / "pipe")
    os.link(folder / "sub" / "notes.md", folder / "hard.md")
    assert not_plain_files(folder) == ["course (a link)", "hard.md (a hard link)", "pipe (not a regular file)",
                                       "sub/answers.ipynb (a link)", "sub/notes.md (a hard link)"]
    elsewhere = tmp_path / "bob"
    elsewhere.mkdir()
    (elsewhere / "attention_kernels").symlink_to(folder, target_is_directory=True)
    assert not_plain_files(elsewhere / "attention_kernels") == ["attention_kernels/"]


def test_kernel_accounts_are_handed_out_in_turn_skip_known_ids_and_need_mapped_ids(tmp_path, monkeypatch):
    """Each kernel gets the next uid (no two live kernels share one, nor a later kernel a uid's leftover
    keyrings soon); a uid a directory resolves to is skipped; a user namespace that does not map the
    range (rootless container) keeps kernels at the grader's account; the parents of bound folders
    inside a hidden one are made passable (0755), once each."""
    import pwd

    from attnlab.grading import sandbox
    from attnlab.grading.sandbox import accounts, bwrap

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.delenv(sandbox.KERNEL_ACCOUNT_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mapped = accounts.ids_mapped
    monkeypatch.setattr(accounts, "ids_mapped", lambda ids, path: True)
    first = sandbox.kernel_account()
    taken = first + 1 if first + 1 in sandbox.KERNEL_IDS else sandbox.KERNEL_IDS.start
    real = pwd.getpwuid
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: real(0) if uid == taken else real(uid))
    assert sandbox.kernel_account() not in (first, taken) and first in sandbox.KERNEL_IDS
    maps = tmp_path / "uid_map"
    maps.write_text("         0       1000          1\n         1     100000      65536\n")
    assert not mapped(sandbox.KERNEL_IDS, str(maps))
    maps.write_text("         0          0 4294967295\n")
    assert mapped(sandbox.KERNEL_IDS, str(maps))
    monkeypatch.setattr(accounts, "ids_mapped", lambda ids, path: False)
    assert sandbox.kernel_account() is None and "maps no uids" in sandbox.kernel_accounts()
    made: set = set()
    assert bwrap.mount_point_parents("/root/.pyenv/versions/3.12", ["/tmp", "/root"], made) == [
        "--perms", "0755", "--dir", "/root/.pyenv", "--perms", "0755", "--dir", "/root/.pyenv/versions"]
    assert bwrap.mount_point_parents("/root/.pyenv/versions/3.11", ["/root"], made) == []
    assert bwrap.mount_point_parents("/usr/lib/python3", ["/root"], made) == []


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or os.uname().machine != "x86_64", reason="root on x86_64 (keyctl's number)")
def test_a_kernel_account_leaves_the_graders_session_keyring():
    """A grader in a session keyring of its own (a container's, a service's): a kernel never reaches it.
    With the sandbox's seccomp filter keyctl itself fails (EPERM); without it (no libseccomp bindings) the
    kernel account joins a new keyring, so it neither reads the grader's keys nor passes its own on."""
    from attnlab.grading import sandbox

    probe = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n"
             "r = libc.syscall(250, 0, ctypes.c_long(-3), 0)\n"  # the session keyring's id
             "print(r if r > 0 else -ctypes.get_errno())")
    parent = ("import ctypes, subprocess, sys\nlibc = ctypes.CDLL(None)\n"
              "print(libc.syscall(250, 1, b'attnlab-test-session'))\n"  # join a new named session keyring
              f"print(subprocess.run({sandbox.wrap([sys.executable, '-c', probe], tempfile.mkdtemp(), None)!r}, "
              "capture_output=True, text=True).stdout.strip())")
    ours, kernel = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60,
                                  check=True).stdout.split()
    assert int(ours) > 0
    if sandbox.seccomp_program():
        assert int(kernel) == -errno.EPERM, kernel
    else:
        assert int(kernel) > 0 and kernel != ours


def test_gpu_nodes_a_kernel_account_cannot_open_are_named(tmp_path, monkeypatch):
    """Open to all, or read-write for a group other than root's: usable. Root's group, a group that may
    only read, or root alone: named, so that the check refuses instead of every GPU case failing; MIG's
    capability nodes (0400 root on the H200 host, where CUDA runs without them) only for a MIG instance."""
    from attnlab.grading import sandbox
    from attnlab.grading.sandbox import devices

    modes = {"nvidia0": (0o666, 44), "nvidia1": (0o660, 44), "nvidiactl": (0o660, 0), "nvidia-uvm": (0o640, 44),
             "nvidia2": (0o600, 0), "nvidia-caps/nvidia-cap1": (0o400, 0)}
    (tmp_path / "nvidia-caps").mkdir()
    for name, (mode, gid) in modes.items():
        (tmp_path / name).write_text("")
        os.chmod(tmp_path / name, mode)
        if os.geteuid() == 0:
            os.chown(tmp_path / name, 0, gid)
    monkeypatch.setattr(devices, "gpu_nodes", lambda: [str(tmp_path / n) for n in modes if "/" not in n]
                        + [str(tmp_path / "nvidia-caps")])
    if os.geteuid() != 0:
        pytest.skip("the nodes' groups can only be set by root")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    closed = {os.path.relpath(p, tmp_path) for p in sandbox.closed_gpu_nodes()}
    assert closed == {"nvidiactl", "nvidia-uvm", "nvidia2"}  # MIG's capability nodes only for a MIG instance
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f1e6c2a-0000-0000-0000-000000000000")
    assert {os.path.relpath(p, tmp_path) for p in sandbox.closed_gpu_nodes()} == closed | {"nvidia-caps/nvidia-cap1"}


def test_plain_nbgrader_never_hands_the_kernel_a_linked_files_target(tmp_path):
    """Plain `nbgrader autograde` copies a submission's files into autograded/ following links, before
    any preprocessor runs: the grader copies into scratch only what was handed in as a plain file."""
    from attnlab.grading.worker import execute

    secret = tmp_path / "root-only.txt"
    secret.write_text("root's secret")
    submitted, autograded, run = (tmp_path / d for d in ("submitted", "autograded", "run"))
    for d in (submitted, autograded, run):
        d.mkdir()
    (submitted / "notes.txt").symlink_to(secret)
    os.link(secret, submitted / "hard.txt")
    (submitted / "data.txt").write_text("mine")
    for name in ("notes.txt", "hard.txt", "data.txt"):  # what nbgrader's copy made of them
        (autograded / name).write_text((submitted / name).read_text())
    ep = execute.GradingExecute()
    ep.km = None
    ep._submission_folder = lambda resources: str(submitted)
    ep._fill_run_dir(str(run), {"metadata": {"path": str(autograded)}})
    assert sorted(os.listdir(run)) == ["data.txt"]


def test_widget_state_is_never_kept_by_the_grader():
    """A cell's widgets can carry any amount of state outside every output cap (a red team sent 400 MB
    per notebook through ten Textareas): the grader's executor, as nbgrader_config.py sets it up,
    neither keeps it nor writes it into the autograded notebook."""
    from traitlets.config.loader import PyFileConfigLoader

    from attnlab.grading.worker.execute import GradingExecute

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert GradingExecute(config=config).store_widget_state is False


def test_review_flags_cannot_be_silenced_by_swapping_the_guards_record():
    """A set subclass whose __contains__ always says yes, put in place of the guard's record of notes
    seen, dropped every later review flag (red team, 2026-12-02)."""
    proc = _run("""
        import json, tempfile
        from attnlab.core import review
        from attnlab.grading.kernel import guard
        guard.install(cwd=tempfile.mkdtemp())
        class Yes(set):
            def __contains__(self, item):
                return True
        guard._STATE.seen = Yes()
        review.flag("a pre-run hook was left behind")
        print(json.dumps(json.loads(guard.drain())))
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any("a pre-run hook was left behind" in n for n in notes), notes
    assert any("record of notes had been replaced" in n for n in notes), notes
