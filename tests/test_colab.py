"""Self-study on Colab: every release notebook runs top to bottom in a bare Python that holds only what
Colab preinstalls, from a folder with nothing of the course beside it.

A virtual environment is made once per session (``colab_venv`` in conftest.py: not from this one's
site-packages, which would leak the course's package) with torch, triton, matplotlib, ipywidgets and
numpy, plus ipykernel and nbclient to run notebooks. The package is built as a wheel
(``course_package``) and the notebooks' first cell installs it from ``ATTNLAB_INSTALL``, as it
installs it from the repository on Colab. Each notebook gets its solution cells from the reference
and must raise nowhere.

Self-check runs there too, as the README tells a self-study learner to install it (the wheel with its
``selfcheck`` extra), with no bubblewrap on the PATH, as on Colab.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attnlab.grading.host.autograde import notebook_points
from attnlab.grading.samples import reference_notebook, release_notebook

from .conftest import ROOT, Course, Venv, clean_env, pip_in

pytestmark = pytest.mark.colab

NOTEBOOKS = sorted(p.stem for p in Course(ROOT).release.glob("*.ipynb"))

_RUNNER = """\
import sys, nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
client = NotebookClient(nb, timeout=600, startup_timeout=120, kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": "."}})
try:
    client.execute()
finally:
    nbformat.write(nb, path)
"""


@pytest.fixture(scope="session")
def colab_env(colab_venv, course_package):
    """(python of a fresh Colab-like venv, its environment, the course wheel)."""
    return colab_venv.venv, colab_venv.env, course_package.wheel


def learner_venv(colab_venv: Venv, wheel: Path, tmp: Path) -> tuple[Path, dict]:
    """A self-study learner's install: a fresh virtual environment on top of what Colab preinstalls (its
    packages seen through a .pth file, not changed), with ``attnlab[selfcheck]`` installed from ``wheel``;
    (the venv, its environment)."""
    venv = tmp / "learner-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = next(venv.glob("lib/python3*/site-packages"))
    colab_site = next(colab_venv.venv.glob("lib/python3*/site-packages"))
    (site / "colab_preinstalled.pth").write_text(f"{colab_site}\n")  # torch & co. as Colab has them
    env = clean_env(tmp, venv)
    # The Colab tests may have left attnlab in the layer below: install it here regardless, then its extra.
    for args in (["--no-deps", "--force-reinstall", str(wheel)], [f"attnlab[selfcheck] @ {wheel.as_uri()}"]):
        p = pip_in(venv, "install", "-q", "--no-compile", *args, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import attnlab, nbgrader; print(attnlab.__file__)"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    return venv, env


def path_without(program: str, folder: Path, path: str) -> str:
    """``path`` with ``program`` left out: ``folder`` holds links to every other program of its folders."""
    folder.mkdir(parents=True)
    for d in path.split(os.pathsep):
        for exe in Path(d).iterdir() if Path(d).is_dir() else ():
            if exe.name != program and not (folder / exe.name).exists():
                (folder / exe.name).symlink_to(exe)
    assert shutil.which(program, path=str(folder)) is None
    return str(folder)


def test_selfcheck_runs_on_colab_without_bubblewrap(colab_venv, course_package, tmp_path):
    """The README's self-study path where bubblewrap is not installed (Colab): selfcheck says in one line
    that the notebooks run without a sandbox, and grades them (full marks for 01's reference, none for 02
    as released), in the time limits."""
    venv, env = learner_venv(colab_venv, course_package.wheel, tmp_path)
    env = {**env, "PATH": path_without("bwrap", tmp_path / "bin", env["PATH"])}
    course = Course(ROOT)
    folder = tmp_path / "content"
    folder.mkdir()
    nbformat.write(reference_notebook(course, "01_online_softmax"), folder / "Copy of 01_online_softmax.ipynb")
    nbformat.write(release_notebook(course, "02_flash_forward"), folder / "02_flash_forward.ipynb")
    p = subprocess.run([str(venv / "bin" / "attnlab"), "selfcheck", "Copy of 01_online_softmax.ipynb",
                        "02_flash_forward.ipynb"], cwd=folder, env=env, capture_output=True, text=True, timeout=1200)
    out = p.stdout + p.stderr
    assert p.stdout.startswith("No sandbox (bubblewrap is not installed): your notebooks run as they do in "
                               "Jupyter"), out[-4000:]
    assert "gradebook" not in out and "students" not in out, out[-4000:]
    full01, full02 = (sum(notebook_points(course, n)[0].values()) for n in ("01_online_softmax", "02_flash_forward"))
    assert f"(as 01_online_softmax): {full01:g}/{full01:g} autograded points" in p.stdout, out[-4000:]
    assert f"Total: {full01:g}/{full01 + full02:g} autograded points" in p.stdout, out[-4000:]
    assert p.returncode == 1  # 02 earns nothing


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_release_notebook_runs_on_a_bare_colab_like_python(colab_env, tmp_path, notebook):
    venv, env, wheel = colab_env
    # Every notebook must install the package itself: remove what an earlier notebook installed.
    pip_in(venv, "uninstall", "-y", "-q", "attnlab", env=env)
    folder = tmp_path / "content"  # Colab's working folder holds nothing of the course
    folder.mkdir()
    path = folder / f"{notebook}.ipynb"
    nbformat.write(reference_notebook(Course(ROOT), notebook), path)
    (tmp_path / "run_notebook.py").write_text(_RUNNER)
    env = {**env, "ATTNLAB_INSTALL": str(wheel)}
    start = time.perf_counter()
    p = subprocess.run([str(venv / "bin" / "python"), str(tmp_path / "run_notebook.py"), str(path)],
                       cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    assert p.returncode == 0, p.stderr[-4000:]
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [(c.metadata.get("nbgrader", {}).get("grade_id", c.id), o.get("ename"), o.get("evalue", "")[:300])
              for c in code for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert all(c.execution_count for c in code), "not every code cell ran"

    def text(cell):
        return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")

    boot = next(c for c in code if c.metadata.get("nbgrader", {}).get("grade_id") == "bootstrap")
    assert f"Installing the course's support package from {wheel}" in text(boot), text(boot)
    setup = next(c for c in code if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    assert "No GPU in use" in text(setup), text(setup)  # the interpreter mode was picked
    # widget cells fell back to a static figure under nbclient
    for c in code:
        if "attnlab.widgets" in c.source or re.search(r"^(causal_tile_map|roofline_calculator)\(", c.source, re.M):
            kinds = [k for o in c.get("outputs", []) for k in o.get("data", {})]
            assert "image/png" in kinds, (c.source[:80], kinds)
            assert not any("widget-view" in k for k in kinds)
    print(f"{notebook}: ran top to bottom in {elapsed:.0f} s")
