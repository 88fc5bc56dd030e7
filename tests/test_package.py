"""What learners install: the package carries the hidden tests for ``attnlab selfcheck`` and no solution or
model answer; selfcheck from an installed wheel grades as the course does; the instructor can leave the
hidden tests out. Also the command line's help and the student's install and JupyterLab paths."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from attnlab import course_files
from attnlab.grading.host.autograde import notebook_points
from attnlab.grading.samples import load_mistakes, apply_mistake, reference_notebook, release_notebook

from .conftest import ROOT, Course, clean_env

ASSIGNMENTS = course_files.checkout_assignments(ROOT)


def _lines(text: str) -> set[str]:
    return {ln.strip() for ln in text.split("\n") if ln.strip()}


def _cells(path: Path):
    return json.loads(path.read_text())["cells"]


def _text(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _solution_lines(cell) -> list[str]:
    """The lines of a solution cell that learners must not get: a solution region, or a whole model answer."""
    text = _text(cell)
    if cell["cell_type"] == "markdown":
        return text.split("\n")
    lines, inside = [], False
    for ln in text.split("\n"):
        if "### BEGIN SOLUTION" in ln:
            inside = True
        elif "### END SOLUTION" in ln:
            inside = False
        elif inside:
            lines.append(ln)
    return lines


#: Lines too common to betray a solution: bare keywords, brackets, a return of plain names.
TRIVIAL = re.compile(r"pass|else:|try:|finally:|continue|break|return(\s+\w+(\s*,\s*\w+)*)?|[()\[\]{},:;]*")


def solution_region_lines() -> dict[str, str]:
    """line -> where it comes from, for every non-trivial line of every solution region and model answer of
    every source notebook of every assignment."""
    secret = {}
    for assignment in ASSIGNMENTS:
        for path in sorted((ROOT / "source" / assignment).glob("*.ipynb")):
            for cell in _cells(path):
                meta = cell["metadata"].get("nbgrader", {})
                if meta.get("solution"):
                    for ln in _lines("\n".join(_solution_lines(cell))):
                        if not TRIVIAL.fullmatch(ln):
                            secret.setdefault(ln, f"{path.stem}:{meta['grade_id']}")
    return secret


def secret_lines() -> set[str]:
    """The lines of :func:`solution_region_lines` that a package may not carry: all but those that are
    also generic code of the support package's own source or the README (``if causal:``)."""
    public = set()
    for path in [*(ROOT / "src").rglob("*.py"), ROOT / "README.md"]:
        public |= _lines(path.read_text())
    return set(solution_region_lines()) - public


def _archive_texts(path: Path) -> dict[str, str]:
    """name -> text of every file in a wheel or an sdist; notebooks as their cells' sources."""
    out = {}
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            items = [(n, z.read(n)) for n in z.namelist() if not n.endswith("/")]
    else:
        with tarfile.open(path) as t:
            items = [(m.name, t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
    for name, data in items:
        text = data.decode("utf-8", "replace")
        if name.endswith(".ipynb"):
            text = "\n".join(_text(c) for c in json.loads(text)["cells"])
        out[name] = text
    return out


# ------------------------------------------------------------------------------ the learner copy
def test_learner_copy_is_the_release_with_the_hidden_tests():
    files = course_files.find()
    assert files is not None and not files.packaged and files.root == ROOT
    for assignment, name in ((a, n) for a, names in ASSIGNMENTS.items() for n in names):
        release = json.loads((ROOT / "release" / assignment / f"{name}.ipynb").read_text())
        source = {c["id"]: c for c in _cells(ROOT / "source" / assignment / f"{name}.ipynb")}
        learner = files.learner_notebook(name)
        assert [c["id"] for c in learner["cells"]] == [c["id"] for c in release["cells"]]
        n_hidden = 0
        for got, rel in zip(learner["cells"], release["cells"]):
            meta = got["metadata"].get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution") and got["cell_type"] == "code":
                assert got["source"] == _text(source[got["id"]])  # the whole test, hidden part included
                n_hidden += "### BEGIN HIDDEN TESTS" in got["source"]
            else:
                assert got == rel
        assert n_hidden, name
    without = course_files.learner_notebook(json.loads((Course(ROOT).source / "01_online_softmax.ipynb").read_text()),
                                            json.loads((Course(ROOT).release / "01_online_softmax.ipynb").read_text()),
                                            hidden_tests=False)
    assert "### BEGIN HIDDEN TESTS" not in json.dumps(without)


def test_learner_copy_refuses_a_stale_release(course):
    source = json.loads((course.source / "01_online_softmax.ipynb").read_text())
    release = json.loads((course.release / "01_online_softmax.ipynb").read_text())
    test = next(c for c in release["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") ==
                "test_online_softmax_matches_logsumexp")
    test["source"] = _text(test) + "\nprint('edited in source/ since the last build')"
    with pytest.raises(ValueError, match="release/ is stale"):
        course_files.learner_notebook(source, release, name="01_online_softmax")


def test_learner_copy_regenerates_the_release_byte_for_byte(tmp_path):
    """nbgrader, given the learner copy and told not to clear solutions again, writes exactly release/:
    the gradebook it fills (test cells, checksums) is the one grading the instructor's source/ fills."""
    course_files.write_learner_course(ROOT, tmp_path / "learner-course")
    c = Course(tmp_path / "course")
    c.root.mkdir()
    (c.root / "source").mkdir()
    for assignment in ASSIGNMENTS:
        (tmp_path / "learner-course" / "learner" / assignment).rename(c.root / "source" / assignment)
    (tmp_path / "learner-course" / "nbgrader_config.py").rename(c.root / "nbgrader_config.py")
    for assignment in ASSIGNMENTS:
        c.nbgrader("generate_assignment", assignment, "--force", "--ClearSolutions.enabled=False", timeout=600)
        for path in sorted((ROOT / "release" / assignment).iterdir()):
            assert (c.root / "release" / assignment / path.name).read_bytes() == path.read_bytes(), path.name


def test_no_release_notebook_holds_a_line_of_any_solution():
    """No line of any solution region or model answer, of any assignment, is in any release notebook:
    a later notebook must not give away an earlier one's solution (learners of the first assignment
    open the second's releases)."""
    secret = solution_region_lines()
    assert len(secret) > 300  # the notebooks' solutions and answers: enough to mean something
    leaks = {}
    for assignment in ASSIGNMENTS:
        for path in sorted((ROOT / "release" / assignment).glob("*.ipynb")):
            found = {ln for cell in _cells(path) for ln in _lines(_text(cell))} & set(secret)
            if found:
                leaks[f"{assignment}/{path.name}"] = sorted(f"{secret[ln]}: {ln}" for ln in found)[:5]
    assert not leaks, leaks


# --------------------------------------------------------------------------- wheel and sdist
def test_wheel_and_sdist_carry_no_solution_and_no_model_answer(course_package):
    secret = secret_lines()
    assert len(secret) > 100  # the notebooks' solutions and answers: enough to mean something
    for archive in (course_package.wheel, course_package.sdist, course_package.sdist_wheel):
        texts = _archive_texts(archive)
        leaks = {name: sorted(_lines(text) & secret)[:3] for name, text in texts.items() if _lines(text) & secret}
        assert not leaks, (archive.name, leaks)
        assert not [n for n in texts if "/source/" in f"/{n}"], archive.name  # no instructor notebooks at all
        for assignment, names in ASSIGNMENTS.items():
            for name in names:
                learner = next(t for n, t in texts.items() if n.endswith(f"learner/{assignment}/{name}.ipynb"))
                assert "### BEGIN HIDDEN TESTS" in learner, (archive.name, name)
        assert any(n.endswith("_course/nbgrader_config.py") or n.endswith("learner_course/nbgrader_config.py")
                   for n in texts)


def test_package_metadata_uses_an_spdx_license_without_warnings(course_package):
    with zipfile.ZipFile(course_package.wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata
    warnings = [ln for ln in course_package.log.splitlines() if re.search(r"licen[cs]e", ln, re.I)
                and re.search(r"deprecat|warning", ln, re.I)]
    assert not warnings, warnings


@pytest.mark.colab
def test_selfcheck_from_an_installed_wheel_grades_the_reference_full_and_the_blank_zero(
        colab_venv, course_package, tmp_path):
    """A learner's install: a fresh virtual environment on top of what Colab preinstalls, the wheel with
    its selfcheck extra (nbgrader), no checkout anywhere near (bubblewrap stays on the PATH: the sandbox is
    used where it works)."""
    from .test_colab import learner_venv

    venv, env = learner_venv(colab_venv, course_package.wheel, tmp_path)
    course = Course(ROOT)
    # a PyTorch notebook and a Triton one: the sample grading covers every notebook's points,
    # test_wheel_and_sdist_carry_no_solution_and_no_model_answer each notebook's hidden tests in the wheel,
    # and `doctor` below that this install finds all of them
    names = ("01_online_softmax", "04_triton_softmax")
    most = sum(sum(notebook_points(course, name)[0].values()) for name in names)
    for student, make in (("reference", reference_notebook), ("blank", release_notebook)):
        folder = tmp_path / student
        folder.mkdir()
        for name in names:
            nbformat.write(make(course, name), folder / f"{name}.ipynb")
        p = subprocess.run([str(venv / "bin" / "attnlab"), "selfcheck", *sorted(p.name for p in folder.iterdir())],
                           cwd=folder, env=env, capture_output=True, text=True, timeout=1200)
        total = re.search(r"^Total: (\S+)/(\S+) autograded points", p.stdout, re.M)
        assert total, p.stdout[-3000:] + p.stderr[-3000:]
        want = f"{most:g}" if student == "reference" else "0"
        assert (total.group(1), total.group(2)) == (want, f"{most:g}"), p.stdout[-4000:]
        assert p.returncode == (0 if student == "reference" else 1)
        assert "No sandbox" not in p.stdout  # bwrap works here: the sandbox is used
    doctor = subprocess.run([str(venv / "bin" / "attnlab"), "doctor", "--quick"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    every = sum(map(len, ASSIGNMENTS.values()))  # the hidden tests of every notebook, not only the two above
    assert re.search(rf"OK +hidden tests +{every} course notebooks (\([^)]*\) )?shipped with the package",
                     doctor.stdout), doctor.stdout


def test_selfcheck_without_hidden_tests_runs_the_visible_ones_and_says_so(tmp_path, monkeypatch):
    """An instructor's package built with ATTNLAB_PACKAGE_HIDDEN_TESTS=0: a bug only the hidden tests
    catch goes unnoticed, and the report says the hidden tests were not available."""
    from attnlab.tools import selfcheck

    assert not course_files.hidden_tests_wanted({course_files.HIDDEN_TESTS_ENV: "0"})
    assert course_files.hidden_tests_wanted({})
    manifest = course_files.write_learner_course(ROOT, tmp_path / "course", hidden_tests=False)
    assert manifest["hidden_tests"] is False
    monkeypatch.setenv(course_files.COURSE_ENV, str(tmp_path / "course"))
    files = course_files.find()
    assert files.packaged and not files.hidden_tests
    course = Course(ROOT)
    mistakes, _ = load_mistakes(course)
    hidden_only = next(m for m in mistakes if m.id == "01-no-inf-guard")  # 4/6 with the hidden tests
    path = tmp_path / "01_online_softmax.ipynb"
    nbformat.write(apply_mistake(reference_notebook(course, "01_online_softmax"), hidden_only), path)
    reports = selfcheck.selfcheck([path], progress=None)
    assert (reports[0].points, reports[0].max_points) == (6, 6)
    text = selfcheck.format_report(reports)
    assert "Hidden tests are not available here" in text
    assert "Every visible test passes (hidden tests are not available here)." in text
    assert "hidden ones included" not in text


# ------------------------------------------------------------------- selfcheck: which check failed
_KERNEL_TRACEBACK = [
    "---------------------------------------------------------------------------",
    "AttributeError                            Traceback (most recent call last)",
    "File .../triton/runtime/interpreter.py:1511, in GridExecutor.__call__(self, *args_dev, **kwargs)\n"
    "-> 1511                 self.fn(**args)",
    "Cell In[4], line 19, in _softmax_kernel(output_ptr, input_ptr, n_cols, BLOCK_SIZE)\n"
    "     18     z = x - tl.max(x, axis=0)\n---> 19     num = tl.exp3(z)",
    "AttributeError: module 'triton.language' has no attribute 'exp3'",
    "\nThe above exception was the direct cause of the following exception:\n",
    "InterpreterError                          Traceback (most recent call last)",
    "Cell In[7], line 2\n      1 for n_cols in (37, 128, 1000):\n"
    "----> 2     check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=n_cols)",
    "File .../attnlab/verify.py:275, in check_softmax_kernel(kernel, n_rows, n_cols)\n"
    "--> 275 _call(launch.run_softmax_kernel, \"_softmax_kernel\", kernel, x_in, y, _key=kernel)",
    "InterpreterError: AttributeError(\"module 'triton.language' has no attribute 'exp3'\")",
]
_TEST_CELL = ("for n_cols in (37, 128, 1000):\n    check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=n_cols)\n"
              "print('visible checks passed')\n### BEGIN HIDDEN TESTS\n"
              "for n_cols in (1, 2, 3, 17, 255):\n    check_softmax_kernel(_softmax_kernel, n_rows=3, n_cols=n_cols)\n"
              "### END HIDDEN TESTS")


@pytest.mark.parametrize("traceback,count,hidden", [
    (_KERNEL_TRACEBACK, 7, False),  # raised inside the kernel's cell (In[4], line 19), called from line 2
    (_KERNEL_TRACEBACK, None, False),
    ([t.replace("Cell In[7], line 2", "Cell In[7], line 6") for t in _KERNEL_TRACEBACK], 7, True),
    (["AssertionError   Traceback (most recent call last)", "Cell In[9], line 6\n----> 6 check(...)",
      "AssertionError: wrong"], 9, True),
])
def test_selfcheck_names_the_check_that_failed(traceback, count, hidden):
    """case02b: an error raised inside a kernel defined in another cell was called a hidden failure."""
    from attnlab.tools.selfcheck import error_of

    cell = nbformat.v4.new_code_cell(_TEST_CELL, execution_count=count)
    cell.outputs = [nbformat.v4.new_output("error", ename=traceback[-1].split(":")[0], evalue="x",
                                           traceback=traceback)]
    assert error_of(cell)[1] is hidden


# ------------------------------------------------------------------------------ command line
def _help(*args: str) -> str:
    """What `attnlab ARGS` prints, run in this process (a subprocess per command cost ~40 s of imports;
    the bare command runs once as a real process in test_help_is_plain_text...)."""
    from attnlab.tools import command

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = command.main(list(args))
        except SystemExit as exit:  # argparse's --help
            status = exit.code
    assert status in (0, None), (args, status)
    return out.getvalue()


COMMANDS = ("build", "samples", "autograde", "collect", "export", "feedback", "grade-samples", "lab",
            "selfcheck", "doctor", "synthetic-class")


def test_help_is_plain_text_and_every_command_has_a_description():
    from attnlab.tools import command

    p = subprocess.run([sys.executable, "-m", "attnlab.tools.command"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    bare = p.stdout
    assert bare.startswith("usage: attnlab") and "selfcheck" in bare  # a bare `attnlab` prints its help
    assert bare == _help()  # the same parser in this process
    for args in [("--help",), *((c, "--help") for c in COMMANDS)]:
        text = _help(*args)
        assert "``" not in text and not re.search(r":[a-z]+:`", text), (args, text)
    parser = command.parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in COMMANDS:
        assert len(sub.choices[name].description or "") > 40, name
    for name in ("build", "samples", "autograde", "collect", "export", "feedback", "grade-samples",
                 "synthetic-class"):
        assert "--course" in sub.choices[name].format_help(), name
    # --course before or after the command; a later default does not undo an earlier value
    assert parser.parse_args(["--course", "/a", "build"]).course == "/a"
    assert parser.parse_args(["build", "--course", "/b"]).course == "/b"


def test_help_lists_each_command_once_names_no_internals_and_says_which_take_assignment():
    """`attnlab --help` lists every command once (argparse's own list left out); no command's help shows
    the code's internal names; the commands said to take --assignment are exactly those that do."""
    from attnlab.tools import command

    top = _help("--help")
    sub = next(a for a in command.parser()._actions if a.dest == "command")
    listed = re.findall(r"^ +attnlab ([a-z-]+)", top, re.M)
    assert sorted(listed) == sorted(sub.choices), listed  # each once, none missing
    assert "{" not in top.split("options:")[0] and top.startswith("usage: attnlab [-h] [--course COURSE] COMMAND")
    said = re.search(r"^([a-z, -]+) work on one assignment", top, re.M).group(1)
    helps = {name: p.format_help() for name, p in sub.choices.items()}
    taking = {name for name, text in helps.items() if "--assignment" in text}
    assert set(said.split(", ")) == taking, (said, taking)
    for name, text in helps.items():
        internal = re.findall(r"(?<![\w/~])\.[a-z_]+\.[a-z_]+|\battnlab\.[a-z_]+|\b[A-Z]+_LIMITS\b", text)
        assert not internal, (name, internal)


# ------------------------------------------------------------------------ the student's path
def test_make_install_gives_students_only_what_they_need_and_make_test_the_rest():
    """A student's `make install` brings no test tools, browser, database driver or hub; `make dev` and
    `make test` (what CI runs) bring all of them."""
    import tomllib

    def dry_run(target: str) -> str:
        return subprocess.run(["make", "-n", "-W", "pyproject.toml", target], cwd=ROOT, capture_output=True,
                              text=True, timeout=60).stdout

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dev_only = ("pytest", "playwright", "psycopg", "jupyterhub")
    assert not [r for r in extras["course"] if r.startswith(dev_only)], extras["course"]
    install = dry_run("install")
    assert 'pip install -q -e ".[course]"' in install
    assert not re.search(r"\.\[[^]]*(test|postgres|hub)", install), install
    assert "install-browser" not in install and "install-hub" not in install, install
    for target in ("dev", "test"):
        out = dry_run(target)
        assert 'pip install -q -e ".[course,test,postgres,hub]"' in out and "install-browser" in out, out
        assert "install-postgres" in out and "install-sandbox" in out and "install-hub" in out
    wanted = {r for e in ("course", "test", "postgres", "hub") for r in extras[e]}
    assert {d for d in dev_only if any(r.startswith(d) for r in wanted)} == set(dev_only)
    conda = (ROOT / "environment.yml").read_text()
    assert "-e .[course]\n" in conda


_HELD_LOCK = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/apt-get.calls"
echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?" >&2
exit 100
"""


@pytest.mark.parametrize("script, program", [("install-sandbox", "bwrap"), ("install-browser", "chromium"),
                                             ("install-postgres", "initdb"), ("install-slurm", "slurmctld")])
def test_install_scripts_wait_for_apt_lock_then_fail_loudly(tmp_path, script, program):
    """`make install` (and `make test`) must stop when apt-get could not install a package (here: another
    install holds dpkg's lock), not carry on to grading or testing without it."""
    from .test_colab import path_without

    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "apt-get").write_text(_HELD_LOCK)
    (fake / "id").write_text("#!/bin/sh\necho 0\n")  # root, who may run apt-get
    for f in fake.iterdir():
        f.chmod(0o755)
    path = os.pathsep.join([str(fake), path_without(program, tmp_path / "bin", "/usr/local/bin:/usr/bin:/bin")])
    env = {"PATH": path, "PG_LIB": str(tmp_path / "no-postgresql"), "HOME": str(tmp_path)}
    p = subprocess.run(["bash", str(ROOT / ".ci" / script)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "another apt-get or dpkg held its lock for more than 120 s" in p.stderr, p.stderr
    assert "Could not get lock" in p.stderr  # apt-get's own words, shown
    calls = (fake / "apt-get.calls").read_text().splitlines()
    assert calls and all("DPkg::Lock::Timeout=120" in c for c in calls), calls


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_in_kernel(base: str, token: str, kernel: str, code: str, timeout: float = 120) -> str:
    """What ``code`` prints when run in JupyterLab's ``kernel`` through the server's websocket, as a
    notebook runs it."""
    import asyncio
    import uuid

    from tornado.websocket import websocket_connect

    async def run() -> str:
        url = f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel}/channels?token={token}"
        ws = await websocket_connect(url)
        msg_id, out = uuid.uuid4().hex, []
        await ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False}}))
        while True:
            msg = json.loads(await ws.read_message())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                ws.close()
                return "".join(out)

    try:
        return asyncio.run(asyncio.wait_for(run(), timeout))
    except (TimeoutError, asyncio.TimeoutError):
        return f"(no answer in {timeout:g} s)"


def test_attnlab_lab_starts_jupyterlab_on_a_copy_without_errors(tmp_path):
    """The README's student command: a copy of the release in a folder of its own, JupyterLab serving it
    (as root too), and nothing in the server's log at ERROR level (nbgrader's "course directory is not
    under the server root"); a kernel starts and talks to the server without ipykernel's warning about
    TCP without encryption."""
    import urllib.error
    import urllib.request

    from attnlab.tools import lab

    folder = tmp_path / "attention-lab"
    (folder / "attention_kernels").mkdir(parents=True)
    mine = folder / "attention_kernels" / "01_online_softmax.ipynb"
    mine.write_text("my work")  # never overwritten
    (folder / "nbgrader_config.py").write_text(lab.OLD_CONFIG)  # as an earlier attnlab lab wrote it: moved
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.tools.command", "lab", str(folder), "--no-browser",
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**clean_env(tmp_path, Path(sys.executable).parent.parent)})
    log, deadline, state = [], time.time() + 120, None
    try:
        for line in proc.stdout:
            log.append(line)
            if f":{port}/lab" in line or time.time() > deadline:
                break
        token = re.search(rf"(http://[^/\s]+:{port})/lab\?token=(\w+)", "".join(log))

        def api(method: str, path: str) -> dict:
            req = urllib.request.Request(f"{token.group(1)}/api/kernels{path}", method=method,
                                         headers={"Authorization": f"token {token.group(2)}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"{}")

        if token:
            while time.time() < deadline:  # the URL is printed a moment before the server listens
                try:
                    kernel = api("POST", "")["id"]
                    break
                except urllib.error.URLError:
                    time.sleep(0.5)
            state = _run_in_kernel(token.group(1), token.group(2), kernel, "print(6 * 7)")
            api("DELETE", f"/{kernel}")
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=60)
        log.append(rest)
    text = "".join(log)
    assert f":{port}/lab" in text, text[-3000:]
    errors = [ln for ln in text.splitlines() if re.match(r"\[E ", ln) or "ERROR" in ln or re.match(r"\[C .*root", ln)]
    assert not errors, errors
    assert "No nbgrader_config.py" not in text  # nbgrader found its settings, out of the listing
    assert state == "42\n", text[-3000:]  # the kernel ran code through the server's (encrypted) channels
    assert "without encryption" not in text, text[-3000:]
    assert mine.read_text() == "my work"
    # JupyterLab lists the assignments' folders only (hidden files are not listed)
    assert {p.name for p in folder.iterdir() if not p.name.startswith(".")} == set(ASSIGNMENTS)
    assert {p.name for p in (folder / "attention_kernels").iterdir()} == {
        p.name for p in (ROOT / "release" / "attention_kernels").iterdir()}


def test_readme_student_commands_use_attnlab_lab():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("### Student in JupyterLab", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert "attnlab lab" in block
    assert "jupyter lab" not in block  # a bare `jupyter lab` fails as root and misplaces nbgrader's course


def test_a_public_copy_without_source_gives_a_package_without_hidden_tests(tmp_path):
    """A private course published as release/ only: the package builds from it, hidden tests left out."""
    import shutil

    public = tmp_path / "public"
    shutil.copytree(ROOT / "release", public / "release")
    shutil.copy(ROOT / "nbgrader_config.py", public / "nbgrader_config.py")
    manifest = course_files.write_learner_course(public, tmp_path / "course", hidden_tests=False)
    assert manifest == {"hidden_tests": False, "assignments": course_files.checkout_assignments(ROOT, "release")}
    for assignment, names in manifest["assignments"].items():
        for name in names:
            got = json.loads((tmp_path / "course" / "learner" / assignment / f"{name}.ipynb").read_text())
            assert got == json.loads((ROOT / "release" / assignment / f"{name}.ipynb").read_text())
    with pytest.raises(FileNotFoundError, match="source"):
        course_files.write_learner_course(public, tmp_path / "again", hidden_tests=True)
