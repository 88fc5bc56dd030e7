"""Self-study on Colab: every release notebook runs top to bottom in a bare Python that holds only what
Colab preinstalls, from a folder with nothing of the course beside it.

A virtual environment is made once per session (not from this one's site-packages, which would leak
the course's package) with torch, triton, matplotlib, ipywidgets and numpy, plus ipykernel and
nbclient to run notebooks. The package is built as a wheel (``pip wheel --no-deps``) and the
notebooks' first cell installs it from ``ATTNLAB_INSTALL``, as it installs it from the repository on
Colab. Each notebook gets its solution cells from the reference and must raise nowhere.
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

from attnlab.grading.samples import reference_notebook

from .conftest import ROOT, Course

pytestmark = pytest.mark.colab

NOTEBOOKS = sorted(p.stem for p in Course(ROOT).release.glob("*.ipynb"))
#: What Colab preinstalls, as far as the course cares; torch pinned to the file on the course machines' disk.
COLAB_PACKAGES = ["torch==2.13.0", "triton", "matplotlib", "ipywidgets", "numpy", "ipykernel", "nbclient"]
_OFFLINE = re.compile(r"Could not find a version|No matching distribution|Failed to establish a new connection|"
                      r"Temporary failure in name resolution|Network is unreachable|ConnectionError|"
                      r"Max retries exceeded|HTTPSConnectionPool", re.IGNORECASE)

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


def _clean_env(tmp: Path, venv: Path) -> dict:
    """The environment of a bare machine: no virtualenv, no PYTHONPATH, no user Jupyter kernels."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNLAB_COURSE",
                                                            "TRITON_INTERPRET", "ATTNLAB_WIDGETS")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env["JUPYTER_DATA_DIR"] = str(tmp / "jupyter-data")
    env["JUPYTER_CONFIG_DIR"] = str(tmp / "jupyter-config")
    env["IPYTHONDIR"] = str(tmp / "ipython")
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    return env


def _pip(venv: Path, *args: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture(scope="session")
def colab_env(tmp_path_factory):
    """(python of a fresh Colab-like venv, its environment, the course wheel)."""
    tmp = tmp_path_factory.mktemp("colab")
    venv = tmp / "venv"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = _clean_env(tmp, venv)
    # --no-compile: byte-compiling torch costs half a minute and Colab's own install is not under test
    p = _pip(venv, "install", "-q", "--no-compile", *COLAB_PACKAGES, env=env)
    if p.returncode != 0:
        if _OFFLINE.search(p.stdout + p.stderr):
            pytest.skip("pip cannot reach its package index to build a Colab-like environment: "
                        + (p.stderr.strip().splitlines() or ["?"])[-1])
        pytest.fail(f"installing {COLAB_PACKAGES} failed:\n{p.stderr[-3000:]}")
    assert _pip(venv, "show", "attnlab", env=env).returncode != 0, "the fresh venv already has attnlab"
    # the wheel, built from a copy of what the package is made of (an in-tree build would write into the repo)
    src = tmp / "src-tree"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "nbgrader_config.py", "source", "src"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info", ".ipynb_checkpoints", "_course"))
        elif (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    wheels = tmp / "dist"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if _OFFLINE.search(p.stdout + p.stderr):
            pytest.skip("pip cannot reach its package index to build the course wheel")
        pytest.fail(f"pip wheel failed:\n{p.stderr[-3000:]}")
    (wheel,) = wheels.glob("attnlab-*.whl")
    print(f"Colab-like venv and wheel ready in {time.perf_counter() - start:.0f} s")
    return venv, env, wheel


def test_wheel_carries_the_instructor_notebooks(colab_env):
    import zipfile

    names = zipfile.ZipFile(colab_env[2]).namelist()
    for nb in NOTEBOOKS:
        assert f"attnlab/_course/source/attention_kernels/{nb}.ipynb" in names
    assert "attnlab/_course/nbgrader_config.py" in names
    assert "attnlab/widgets.py" in names


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_release_notebook_runs_on_a_bare_colab_like_python(colab_env, tmp_path, notebook):
    venv, env, wheel = colab_env
    # Every notebook must install the package itself: remove what an earlier notebook installed.
    _pip(venv, "uninstall", "-y", "-q", "attnlab", env=env)
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
