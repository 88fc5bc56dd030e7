"""Self-study on Colab: every release notebook runs top to bottom in a bare Python that holds only what
Colab preinstalls, from a folder with nothing of the course beside it.

A virtual environment is made once per session (``colab_venv`` in conftest.py: not from this one's
site-packages, which would leak the course's package) with torch, triton, matplotlib, ipywidgets and
numpy, plus ipykernel and nbclient to run notebooks. The package is built as a wheel
(``course_package``) and the notebooks' first cell installs it from ``ATTNLAB_INSTALL``, as it
installs it from the repository on Colab. Each notebook gets its solution cells from the reference
and must raise nowhere.
"""

from __future__ import annotations

import re
import subprocess
import time

import nbformat
import pytest

from attnlab.grading.samples import reference_notebook

from .conftest import ROOT, Course, pip_in

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
