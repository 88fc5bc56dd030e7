"""The learner's tools: interactive figures (and their static fallback), ``attnlab selfcheck``,
``attnlab doctor``, and the notebook cells that show the figures."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest
import torch

from attnlab import course_files
from attnlab import widgets as W
from attnlab.grading.samples import apply_mistake, load_mistakes, reference_notebook, release_notebook

from .conftest import ROOT, Course

matplotlib.use("Agg")


# ------------------------------------------------------------------------------------------ widgets
@pytest.mark.parametrize("block_size", [1, 3, 8, 40, 100])
def test_online_softmax_trace_ends_at_logsumexp(block_size):
    x = W.default_softmax_row()
    steps = W.online_softmax_trace(x, block_size)
    assert len(steps) == math.ceil(len(x) / block_size)
    last = steps[-1]
    assert last.m_new == pytest.approx(x.max())
    assert last.m_new + math.log(last.l_new) == pytest.approx(float(torch.logsumexp(torch.tensor(x), 0)), abs=1e-12)
    assert steps[0].rescale == 0.0  # nothing to rescale before the first block
    for s in steps[1:]:
        assert s.rescale == pytest.approx(math.exp(s.m_old - s.m_new))
        assert (s.rescale == 1.0) == (s.block_max <= s.m_old)


def test_online_softmax_trace_survives_a_masked_leading_block():
    x = np.r_[np.full(8, -np.inf), np.arange(5.0)]
    last = W.online_softmax_trace(x, 4)[-1]
    assert math.isfinite(last.l_new) and last.m_new + math.log(last.l_new) == pytest.approx(
        float(torch.logsumexp(torch.arange(5.0, dtype=torch.float64), 0)))


@pytest.mark.parametrize("T,bq,bk", [(1024, 64, 64), (256, 32, 32), (50, 7, 11), (50, 11, 7), (20, 32, 32), (37, 16, 8)])
def test_tile_classes_agree_with_the_causal_mask(T, bq, bk):
    cls = W.tile_classes(T, bq, bk)
    mask = np.tril(np.ones((T, T), dtype=bool))  # query i sees key j <= i
    for a in range(cls.shape[0]):
        for b in range(cls.shape[1]):
            tile = mask[a * bq:(a + 1) * bq, b * bk:(b + 1) * bk]
            want = W.FULL if tile.all() else W.SKIP if not tile.any() else W.DIAGONAL
            assert cls[a, b] == want, (a, b)
    s = W.tile_summary(T, bq, bk, D=16)
    assert s["full"] + s["diagonal"] + s["skipped"] == s["total"] == cls.size
    assert s["useful_flops"] == pytest.approx(4 * 16 * mask.sum())
    assert s["useful_flops"] <= s["flops_visited"] <= s["flops_noncausal"]


def test_tile_summary_answers_the_prediction_cell():
    s = W.tile_summary(1024, 64, 64)
    assert s["visited"] == 136 and s["total"] == 256  # notebook 02's causal_tiles_visited


def test_attention_traffic_matches_the_prediction_cells():
    t = W.attention_traffic(T=2048, D=64, B=8, H=16, bytes_per_el=2, causal=True)
    assert t["score_matrix_bytes"] == 2**30                       # notebook 05's score_matrix_bytes
    assert t["fused_flops"] == 4 * 8 * 16 * 2048**2 * 64 / 2      # notebook 05's causal_fwd_flops
    one = W.attention_traffic(T=8192, D=64, bytes_per_el=2)
    assert one["score_matrix_bytes"] == 8192**2 * 2               # notebook 01's bytes_scores_one_head
    assert one["naive_bytes"] > 4 * one["score_matrix_bytes"]     # four trips of S and P, plus Q, K, V, O
    assert t["naive_intensity"] < t["fused_intensity"] < t["fused_ideal_intensity"]


def test_figures_draw_with_defaults_and_odd_sizes():
    import matplotlib.pyplot as plt

    for fig in (W.online_softmax_figure(), W.online_softmax_figure(block_size=3, step=2),
                W.tile_map_figure(), W.tile_map_figure(T=50, block_q=7, block_k=11),
                W.roofline_figure(), W.roofline_figure(T=512, D=1024, causal=False, bytes_per_el=4)):
        assert fig.axes
        plt.close(fig)


def test_frontend_detection(monkeypatch):
    monkeypatch.delenv("ATTNLAB_WIDGETS", raising=False)
    assert not W.interactive_frontend()  # plain Python, no kernel
    monkeypatch.setenv("ATTNLAB_WIDGETS", "1")
    assert W.interactive_frontend()
    monkeypatch.setenv("ATTNLAB_WIDGETS", "0")
    assert not W.interactive_frontend()


def test_no_frontend_means_no_ipywidgets_import(monkeypatch):
    """Where nothing renders widgets (nbgrader, a script) the detection does not import ipywidgets:
    a quarter of a second in every graded kernel that draws a figure."""
    import builtins

    real_import, asked = builtins.__import__, []

    def recording_import(name, *args, **kwargs):
        asked.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.delenv("ATTNLAB_WIDGETS", raising=False)
    monkeypatch.setattr(builtins, "__import__", recording_import)
    assert not W.interactive_frontend()
    assert not [n for n in asked if n.startswith("ipywidgets")]


def test_no_ipywidgets_means_a_static_figure(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("ipywidgets"):
            raise ImportError("no ipywidgets here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setenv("ATTNLAB_WIDGETS", "1")
    monkeypatch.setattr(builtins, "__import__", fake_import)
    assert not W.interactive_frontend()
    drawn = []
    monkeypatch.setattr(W, "show_static", lambda fig: drawn.append(fig))
    W.causal_tile_map()
    W.online_softmax_explorer()
    W.roofline_calculator()
    assert len(drawn) == 3


def test_under_the_autograder_widgets_print_a_note_and_draw_nothing(monkeypatch, capsys):
    from attnlab.grading.kernel import guard

    drawn = []
    monkeypatch.setattr(W, "show_static", lambda fig: drawn.append(fig))
    monkeypatch.setenv("ATTNLAB_WIDGETS", "0")
    monkeypatch.setattr(guard, "active", lambda: True)
    W.causal_tile_map()
    W.online_softmax_explorer()
    W.roofline_calculator()
    assert drawn == [] and capsys.readouterr().out.count("not drawn while autograding") == 3
    W.causal_tile_map(interactive=False)  # an explicit choice is still honoured
    assert len(drawn) == 1
    monkeypatch.setattr(guard, "active", lambda: False)
    W.causal_tile_map()
    assert len(drawn) == 2


def test_widgets_redraw_when_a_control_changes():
    box = W.tile_map_widget(T=64, block_q=16, block_k=16)
    controls = {c.description: c for c in box.children[0].children}
    assert set(controls) == {"T", "block_q", "block_k", "D"}
    calls = []
    original = box._attnlab_redraw
    controls["block_q"].observe(lambda ch: calls.append(ch["new"]), names="value")
    controls["block_q"].value = 32
    assert calls == [32]
    original()
    sm = W.online_softmax_widget()
    size, step = sm.children[0].children
    size.value = 5
    assert step.max == math.ceil(40 / 5) - 1
    size.value = 40
    assert step.max == 0
    rf = W.roofline_widget()
    assert {c.description for c in rf.children[0].children} >= {"T", "D", "causal", "device"}


def _widget_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and "attnlab.widgets" in c.source]


def test_notebooks_01_and_02_show_the_figures_in_plain_cells(course):
    for name, calls in (("01_online_softmax", ["online_softmax_explorer("]),
                        ("02_flash_forward", ["causal_tile_map(", "roofline_calculator("])):
        nb = release_notebook(course, name)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        for call in calls:
            assert call in text, (name, call)
        for cell in _widget_cells(nb):
            assert "nbgrader" not in cell.metadata  # ungraded, not locked: a learner may play with it


# ---------------------------------------------------------------------------------------- selfcheck
@pytest.fixture(scope="module")
def learner_folder(tmp_path_factory):
    """A self-study learner's folder: notebook 01 with a bug only the hidden tests catch (saved by Colab
    under another name), and notebook 02 as released (nothing implemented)."""
    folder = tmp_path_factory.mktemp("learner")
    course = Course(ROOT)
    mistakes, _ = load_mistakes(course)
    hidden_only = next(m for m in mistakes if m.id == "01-no-inf-guard")
    nbformat.write(apply_mistake(reference_notebook(course, "01_online_softmax"), hidden_only),
                   folder / "Copy of 01_online_softmax.ipynb")
    nbformat.write(release_notebook(course, "02_flash_forward"), folder / "02_flash_forward.ipynb")
    nbformat.write(reference_notebook(course, "02_flash_forward"), folder / "my_flash.ipynb")
    return folder


def _attnlab(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "attnlab.tools.command", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900, env=env)


def test_selfcheck_reports_each_test_with_hidden_and_visible_failures(learner_folder, tmp_path):
    p = _attnlab("selfcheck", "Copy of 01_online_softmax.ipynb", "02_flash_forward.ipynb",
                 "--keep", str(tmp_path / "kept"), cwd=learner_folder)
    out = p.stdout
    assert p.returncode == 1, p.stderr + out
    lines = out.splitlines()
    # notebook 01: everything passes except the masked-block case, which only a hidden test has
    assert "Copy of 01_online_softmax.ipynb (as 01_online_softmax): 4/6 autograded points" in out, out
    assert any(ln.split()[:2] == ["PASS", "test_online_softmax_matches_logsumexp"] for ln in lines)
    i = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["FAIL", "test_online_softmax_handles_growing_max"])
    assert "a hidden check failed" in lines[i + 1]
    assert "AssertionError" in lines[i + 2] and "not finite" in out
    # notebook 02 as released: nothing implemented, a visible check fails with a readable reason
    assert "02_flash_forward.ipynb (as 02_flash_forward): 0/10 autograded points" in out
    i = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["FAIL", "test_flash_forward_matches_naive"])
    assert "a visible check failed" in lines[i + 1] and "NotImplementedError" in lines[i + 2]
    assert "answer-why-faster" in out and "NOT ANSWERED YET" in out
    assert "Total: 4/16 autograded points" in out
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [
        "01_online_softmax.autograded.ipynb", "02_flash_forward.autograded.ipynb"]


def test_selfcheck_recognises_notebooks_by_name_or_cells(learner_folder):
    from attnlab.course_files import source_notebooks
    from attnlab.tools.selfcheck import identify_notebook

    sources = source_notebooks()
    assert identify_notebook(learner_folder / "Copy of 01_online_softmax.ipynb", sources) == "01_online_softmax"
    assert identify_notebook(learner_folder / "my_flash.ipynb", sources) == "02_flash_forward"


def test_selfcheck_report_of_full_marks():
    from pathlib import Path

    from attnlab.tools.selfcheck import NotebookReport, TestReport, format_report

    rep = NotebookReport(Path("mine.ipynb"), "02_flash_forward", "graded", seconds=3.0, tests=[
        TestReport("test_a", 3.0, 3.0, "test"), TestReport("answer-b", None, 1.0, "written answer", answered=True),
        TestReport("answer-c", None, 2.0, "written answer", answered=False)])
    text = format_report([rep])
    assert "mine.ipynb (as 02_flash_forward): 3/3 autograded points" in text
    assert "PASS  test_a" in text and "1 pt, graded by hand: answered" in text
    assert "2 pts, graded by hand: NOT ANSWERED YET" in text, text
    assert "Every test passes, hidden ones included." in text
    dead = NotebookReport(Path("x.ipynb"), "01_online_softmax", "failed", reason="the kernel died")
    assert "NOT GRADED: the kernel died" in format_report([dead])


def test_selfcheck_refuses_what_it_cannot_grade(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nbformat.write(nb, tmp_path / "notes.ipynb")
    p = _attnlab("selfcheck", "notes.ipynb", cwd=tmp_path)
    assert p.returncode == 2 and "is not one of the course's notebooks" in p.stderr
    p = _attnlab("selfcheck", "missing.ipynb", cwd=tmp_path)
    assert p.returncode == 2 and "no such file" in p.stderr


def test_selfcheck_without_nbgrader_says_how_to_get_it(monkeypatch, tmp_path):
    import importlib.util

    from attnlab.tools import selfcheck

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbgrader" else real(name, *a))
    with pytest.raises(selfcheck.SelfcheckError, match="pip install 'nbgrader==0.9.6'"):
        selfcheck.selfcheck([tmp_path / "x.ipynb"])


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    """A PATH without bwrap (only this interpreter's folder), and sandbox.check() asked again."""
    from attnlab.grading import sandbox

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    sandbox.check.cache_clear()
    yield
    sandbox.check.cache_clear()


def test_selfcheck_without_bwrap_says_so_in_one_line_before_preparing(no_bwrap, monkeypatch, learner_folder):
    """A learner without bubblewrap (Colab): told at once, in one line, that their notebook runs unsandboxed
    with time limits, and graded; with --sandbox, refused before any preparation, in the learner's terms."""
    from attnlab.tools import selfcheck

    calls = []
    monkeypatch.setattr(selfcheck, "selfcheck_assignment",
                        lambda course, files, jobs, *a: calls.append((list(jobs), a[-1])) or [])
    said = []
    selfcheck.selfcheck([learner_folder / "my_flash.ipynb"], limit_s=300, progress=said.append)
    assert calls == [(["02_flash_forward"], True)]  # graded, without the sandbox
    assert len(said) == 1 and said[0].startswith("No sandbox (bubblewrap is not installed)"), said
    assert "300 s" in said[0] and "gradebook" not in said[0] and "students" not in said[0]
    calls.clear()
    with pytest.raises(selfcheck.SelfcheckError, match="--sandbox: .*leave out --sandbox"):
        selfcheck.selfcheck([learner_folder / "my_flash.ipynb"], require_sandbox=True, progress=said.append)
    assert calls == []


def test_a_kernel_outside_the_sandbox_starts_without_the_tcp_warning(capfd):
    """selfcheck without bubblewrap, and plain nbgrader commands, start kernels over TCP with the course's
    nbgrader_config.py: encrypted where jupyter_client can, so ipykernel does not warn at every start."""
    from nbclient import NotebookClient
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    NotebookClient(nb, kernel_name="python3", config=config, startup_timeout=120).execute()
    assert nb.cells[0].outputs[0]["text"] == "42\n"
    assert "without encryption" not in capfd.readouterr().err


def test_course_files_found_in_a_checkout_and_from_the_environment(monkeypatch, tmp_path):
    from attnlab import course_files

    assert set(course_files.source_notebooks()) == set(Course(ROOT).all_notebook_names())  # both assignments
    monkeypatch.setenv(course_files.COURSE_ENV, str(tmp_path))  # not a course: falls through to the checkout
    assert course_files.course_root() == ROOT


# ------------------------------------------------------------------------------------------- doctor
def test_doctor_reports_this_environment():
    p = _attnlab("doctor", cwd=ROOT)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    for name in ("Python", "PyTorch", "device", "Triton", "Triton interpreter", "nbgrader", "JupyterLab",
                 "nbgrader lab extension", "nbgrader server extension", "widgets lab extension", "ipywidgets"):
        assert any(ln.split()[1:2] and ln[8:].startswith(name) for ln in out.splitlines()), (name, out)
    assert "OK    nbgrader lab extension     @jupyter/nbgrader 0.9.6 enabled" in out
    counts = ", ".join(f"{len(names)} {a}" for a, names in course_files.checkout_assignments(ROOT).items())
    assert f"course notebooks ({counts})" in out and "attention_kernels_beyond" in counts  # both assignments
    mode = "GPU mode" if torch.cuda.is_available() else "interpreter mode"
    assert mode in out
    assert out.rstrip().endswith(("Ready.", ")."))


def test_doctor_prints_each_check_as_it_finishes_slow_ones_last(monkeypatch, capsys):
    """On a busy machine the slow checks take a minute: the quick ones are on screen before they end."""
    import threading
    import time

    from attnlab.tools import doctor

    release = threading.Event()

    def slow_sandbox():
        release.wait(120)
        return doctor.Check("grading sandbox", doctor.OK, "slow")

    monkeypatch.setattr(doctor, "check_sandbox", slow_sandbox)
    run = threading.Thread(target=doctor.main, args=(["--quick"],))
    run.start()
    out, deadline = "", time.monotonic() + 120
    while "Triton  " not in out and time.monotonic() < deadline:
        time.sleep(0.2)
        out += capsys.readouterr().out
    try:
        for name in ("Python", "attnlab", "ipywidgets", "PyTorch", "Triton  "):
            assert f"  {name}" in out, (name, out)  # on screen while the sandbox check still runs
        assert "grading sandbox" not in out and "Ready" not in out
    finally:
        release.set()
        run.join(60)
    out += capsys.readouterr().out
    checks = [ln for ln in out.splitlines() if re.match(r"  (OK|NOTE|WARN|FAIL) ", ln)]
    assert checks[-1].split()[1:3] == ["grading", "sandbox"], checks


def test_doctor_gives_advice_for_problems(monkeypatch):
    from attnlab.tools import doctor

    monkeypatch.setattr(doctor, "installed_version", lambda dist: {"nbgrader": "0.9.5", "jupyterlab": "3.6.0",
                                                          "triton": "3.9.0", "ipywidgets": "7.8.0",
                                                          "matplotlib": "3.9"}.get(dist))
    monkeypatch.setattr(doctor, "jupyter_output", lambda *a, **k: "@jupyter/nbgrader v0.9.5 disabled OK\n")
    checks = {c.name: c for c in doctor.run_checks(smoke=False)}
    assert checks["nbgrader"].status == doctor.WARN and "nbgrader==0.9.6" in checks["nbgrader"].advice
    assert checks["JupyterLab"].status == doctor.FAIL
    assert checks["nbgrader lab extension"].status == doctor.FAIL
    assert "labextension enable" in checks["nbgrader lab extension"].advice
    assert checks["nbgrader server extension"].status == doctor.FAIL
    assert checks["ipywidgets"].status == doctor.WARN
    text = doctor.format_checks(list(checks.values()))
    assert "problem(s) to fix" in text


# ------------------------------------------------------------------------------------------- README
def test_readme_colab_badges_match_the_configured_repository(course):
    """The README's badge table is built from the same [tool.attnlab] as the notebooks' own badges."""
    from attnlab.grading.host.build import colab_url, course_settings

    readme = (ROOT / "README.md").read_text()
    settings = course_settings(ROOT)
    for path in sorted(p for each in course.assignments() for p in each.release.glob("*.ipynb")):
        url = colab_url(settings, path.stem)
        assert f"(https://colab.research.google.com/assets/colab-badge.svg)]({url})" in readme, path.stem
        first = nbformat.read(path, as_version=4).cells[0].source
        assert url in first  # the notebook's own badge
    for title in ("### Student in JupyterLab", "### Self-study on Colab", "### Instructor"):
        assert title in readme


def test_interpreter_results_like_log_of_zero_print_no_numpy_warning():
    """-inf from tl.log(0) is a valid result (an empty split's LSE); numpy's RuntimeWarning on stderr
    would make `nbgrader validate` fail a correct notebook."""
    script = (
        "import attnlab; attnlab.init(verbose=False)\n"
        "import torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def k(x_ptr, o_ptr):\n"
        "    offs = tl.arange(0, 4)\n"
        "    tl.store(o_ptr + offs, tl.log(tl.load(x_ptr + offs)))\n"
        "o = torch.empty(4)\n"
        "k[(1,)](torch.zeros(4), o)\n"
        "print(o.tolist())\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr
    assert "-inf" in run.stdout and "RuntimeWarning" not in run.stderr, run.stderr


def test_sweep_table_shows_no_nan_memory():
    from attnlab.sweep import Point

    point = Point("yours", 64, 1, 2, 16, True, "float32", ms=1.0, tflops=0.1)  # timed on a CPU: no GPU memory
    assert point.peak_mem_text().strip() == "n/a (CPU)"
    point.status = "oom"
    assert point.peak_mem_text().strip() == "n/a"
    point.peak_mem_gib = 1.5
    assert point.peak_mem_text() == "    1.50 GiB"


@pytest.mark.parametrize("ratio, says", [
    (2.0, "factor of 2"), (0.5, "factor of 2"), (4.0, "factor of 4"), (1e-3, "power of 1000"),
    (1e12, "power of 1000"), (2**30 / 1e9, "binary against decimal"), (1000 / 1024, "binary against decimal"),
    (1.5, None), (3.0, None), (0.9, None), (1.02, None), (1.03, None), (0.97, None),
    (1024, "binary against decimal"), (8.0, "factor of 8"), (2000, "power of 1000"), (1 / 2000, "factor of 2"),
])
def test_a_wrong_prediction_names_the_telling_factor(ratio, says):
    """06-causal-flops-not-halved answers 2x, 06-naive-time-in-seconds 1/1000x: the message says which
    kind of slip that ratio points at, and nothing for a ratio that points at none."""
    from attnlab.checks import assert_number

    with pytest.raises(AssertionError) as err:
        assert_number(6.135 * ratio, 6.135, name="kernel_us_at_512")
    assert ("Off by" in str(err.value)) == (says is not None) and (says or "") in str(err.value), str(err.value)


def test_selfcheck_says_when_predictions_were_checked_for_the_release_shapes(monkeypatch):
    """Without a student id selfcheck checks the release's shapes, which a graded course may not use:
    the report says so, and says nothing of it once the id is set or for a notebook with no prediction."""
    from attnlab import variants
    from attnlab.tools.selfcheck import NotebookReport, format_report

    for env in (variants.STUDENT_ENV, variants.HUB_ENV):
        monkeypatch.delenv(env, raising=False)
    asked = NotebookReport(Path("01_online_softmax.ipynb"), "01_online_softmax", "graded")
    plain = NotebookReport(Path("04_triton_softmax.ipynb"), "04_triton_softmax", "graded")
    assert variants.STUDENT_ENV in format_report([asked])
    assert variants.STUDENT_ENV not in format_report([plain])
    monkeypatch.setenv(variants.STUDENT_ENV, "ada-1001")
    assert variants.STUDENT_ENV not in format_report([asked])


def test_selfcheck_names_the_nbgrader_pin_of_the_installed_package():
    """The install hint follows pyproject's selfcheck extra instead of a version written into the code."""
    import re as _re
    import tomllib
    from pathlib import Path as _Path

    from attnlab.tools.selfcheck import nbgrader_requirement

    extra = tomllib.loads((_Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["selfcheck"]
    pin = next(r for r in extra if _re.match(r"nbgrader\b", r)).replace(" ", "")
    assert nbgrader_requirement() == pin
