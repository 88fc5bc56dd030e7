"""The course on JupyterHub with nbgrader's exchange, end to end (issue 35).

A JupyterHub (from PyPI) and its proxy (configurable-http-proxy, from npm) run on 127.0.0.1 with free
ports, started and stopped here. Users log in with a shared password (JupyterHub's
``SharedPasswordAuthenticator``) and each gets a single-user JupyterLab with nbgrader's server
extensions, started by ``SimpleLocalProcessSpawner``: every server runs as the hub's own user, in a home
folder of its own. (System users would need root and leave accounts behind on the machine when a run
dies; what separate users add, the exchange's permissions, is what ``attnlab doctor``'s hub check
looks at, and it is run here on the same exchange.) The exchange is a temporary folder, named in a
system-wide style ``nbgrader_config.py`` (``JUPYTER_CONFIG_PATH``) that every server reads.

Everything goes through the servers' own REST handlers, the ones the Assignments tab and formgrader
call: the instructor releases both assignments (formgrader's API, from the committed ``release/``), the
students ``alice`` (the model solutions) and ``bob`` (the typical mistake of each notebook) fetch,
save their work through the contents API and submit; the instructor collects, grades with
``attnlab autograde`` (sandboxed; one notebook per assignment, :data:`GRADED`) and its feedback, and
releases the feedback; the students fetch it.
One browser step opens bob's Assignments panel through the hub.

Needs jupyterhub (the ``hub`` extra), configurable-http-proxy (``make dev``: .ci/install-hub) and
bubblewrap; without them it skips and says what to install (under CI, CI=true, it fails instead).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from attnlab.grading.host.build import generate_assignment
from attnlab.grading.samples import apply_mistake, load_mistakes, solution_cells

from .conftest import ROOT, Course, copy_course
from .test_browser import CHROMIUM_FLAGS, _chromium, _free_port, _menu, _stop

pytestmark = pytest.mark.hub

BIN = Path(sys.executable).parent
COURSE_ID = "attention-kernels"  # nbgrader_config.py's
INSTRUCTOR, STUDENTS = "instructor", ("alice", "bob")
ASSIGNMENTS = [c.assignment for c in Course(ROOT).assignments()]
MISTAKES, TYPICAL = load_mistakes(Course(ROOT))
#: bob's work: the typical mistake of each notebook that has one (samples/mistakes/*.py's TYPICAL)
BOBS_MISTAKES = {m.notebook: m for m in MISTAKES if m.id in TYPICAL}
#: The notebook of each assignment the instructor grades here (`attnlab autograde --notebook`): the whole
#: exchange round trip needs one, and every notebook's grading has its own tests; the two quickest to grade
#: keep this test's cost down (all 9 notebooks of both students: ~260 CPU-s).
GRADED = {"attention_kernels": "02_flash_forward", "attention_kernels_beyond": "09_tuning_and_fp8"}


#: What an administrator writes once for every server (on a real hub /etc/jupyter/nbgrader_config.py).
#: Every server here runs as the same system user, and nbgrader names a student by the process's user
#: (by JUPYTERHUB_USER only for "jovyan", Docker's and zero-to-jupyterhub's user): each student is named
#: by their hub login instead. The instructor's own course config adds the rest.
NBGRADER_CONFIG = """\
import os
c = get_config()
c.Exchange.root = {exchange!r}
c.CourseDirectory.course_id = {course!r}
if os.environ.get("JUPYTERHUB_USER", {instructor!r}) != {instructor!r}:
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
"""


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the hub test (`make dev` installs what it needs)")
    pytest.skip(reason)


def _proxy_command() -> str:
    """configurable-http-proxy: the one .ci/install-hub puts in the virtual environment, else PATH's."""
    found = shutil.which("configurable-http-proxy", path=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    if found is None:
        _unavailable("configurable-http-proxy is not installed (`make dev`, or: "
                     f"npm install -g --prefix {BIN.parent} configurable-http-proxy)")
    return found


def _requirements() -> str:
    try:
        import jupyterhub  # noqa: F401
        import requests  # noqa: F401
    except ImportError:
        _unavailable("jupyterhub is not installed (pip install -e '.[hub]', or `make dev`)")
    from attnlab.grading.sandbox import check

    ok, detail = check()
    if not ok:
        _unavailable(f"attnlab autograde needs its sandbox: {detail}")
    return _proxy_command()


def _wait(what: str, ready, timeout: float, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = log.read_text()[-4000:] if log and log.exists() else ""
            pytest.fail(f"{what} not within {timeout:.0f} s\n{tail}")
        time.sleep(0.5)


class Hub:
    """A running hub: its REST API (as an admin service) and each user's server (with the user's token)."""

    def __init__(self, url: str, token: str, home: Path, log: Path):
        import requests

        self.url, self.home, self.log = url, home, log
        self.admin = requests.Session()
        self.admin.headers["Authorization"] = f"token {token}"
        self.users: dict[str, requests.Session] = {}

    def api(self, method: str, path: str, **kw):
        r = self.admin.request(method, f"{self.url}/hub/api/{path}", timeout=60, **kw)
        assert r.status_code < 400, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def start(self, names) -> None:
        """Start the users' servers side by side; a token per user for their own server."""
        import requests

        for name in names:
            self.api("POST", f"users/{name}/server")
        for name in names:
            _wait(f"{name}'s server", lambda: (self.api("GET", f"users/{name}")["servers"].get("") or {}).get("ready"),
                  180, self.log)
            token = self.api("POST", f"users/{name}/tokens", json={"note": "attnlab hub test", "expires_in": 3600})
            self.users[name] = requests.Session()
            self.users[name].headers["Authorization"] = f"token {token['token']}"

    def server(self, name: str, method: str, path: str, **kw):
        """``path`` on ``name``'s single-user server, with ``name``'s token; the JSON it answers."""
        r = self.users[name].request(method, f"{self.url}/user/{name}/{path}", timeout=300, **kw)
        assert r.status_code < 400, (name, method, path, r.status_code, r.text[:2000])
        return r.json() if r.content else None

    def pids(self) -> list[int]:
        """The single-user servers' process ids, from the spawners' state in the hub's database."""
        db = self.log.parent / "jupyterhub.sqlite"
        with sqlite3.connect(db) as con:
            states = [json.loads(s) for (s,) in con.execute("SELECT state FROM spawners") if s]
        return [s["pid"] for s in states if s.get("pid")]


def _hub_config(tmp: Path, ports: dict, token: str, password: str, proxy: str, config_path: Path) -> Path:
    env = {"PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]), "JUPYTER_CONFIG_PATH": str(config_path)}
    args = ["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []
    config = f"""
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {ports['hub']}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {ports['internal']}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports['proxy_api']}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.db_url = "sqlite:///{tmp / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(tmp / 'cookie_secret')!r}
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {password!r}
c.Authenticator.allowed_users = {{{', '.join(repr(u) for u in (INSTRUCTOR, *STUDENTS))}}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(tmp / 'home' / '{username}')!r}
c.Spawner.cmd = [{str(BIN / 'jupyterhub-singleuser')!r}]
c.Spawner.args = {args!r}
c.Spawner.default_url = "/lab"
c.Spawner.environment = {env!r}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.JupyterHub.services = [{{"name": "course-admin", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "course-admin", "services": ["course-admin"],
                             "scopes": ["admin:users", "admin:servers", "tokens"]}}]
"""
    path = tmp / "jupyterhub_config.py"
    path.write_text(config)
    return path


@pytest.fixture(scope="module")
def hub():
    """The hub, the three users' servers, the exchange and the instructor's course (home/instructor)."""
    proxy = _requirements()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="attnlab-hub-"))
    home, exchange, etc = tmp / "home", tmp / "exchange", tmp / "etc-jupyter"
    # the instructor's home is the course: its committed release/, both assignments in a fresh gradebook
    course = copy_course(_mkdir(home / INSTRUCTOR))
    registering = ThreadPoolExecutor(1).submit(_register, course, tmp)  # while the hub starts (a minute)
    # what an administrator sets up once (docs/hub.md): a world-writable exchange, and one nbgrader
    # config every server reads (on a real hub /etc/jupyter/nbgrader_config.py)
    exchange.mkdir(mode=0o777)
    exchange.chmod(0o777)  # not narrowed by the umask
    _mkdir(etc).joinpath("nbgrader_config.py").write_text(NBGRADER_CONFIG.format(exchange=str(exchange),
                                                                              course=COURSE_ID, instructor=INSTRUCTOR))
    ports = {k: _free_port() for k in ("hub", "internal", "proxy_api")}
    token, password = secrets.token_hex(32), secrets.token_hex(8)
    config = _hub_config(tmp, ports, token, password, proxy, etc)
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_DB_URL"}  # the course's own SQLite gradebook
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    log_path = tmp / "jupyterhub.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([str(BIN / "jupyterhub"), "-f", str(config)], cwd=tmp, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    h = Hub(f"http://127.0.0.1:{ports['hub']}", token, home, log_path)
    h.password, h.course, h.exchange, h.config_path, h.tmp = password, course, exchange, etc, tmp
    pids = []
    try:
        import requests

        def up():
            if proc.poll() is not None:
                pytest.fail("JupyterHub exited:\n" + log_path.read_text()[-4000:])
            try:
                return requests.get(f"{h.url}/hub/api/", timeout=5).ok
            except requests.ConnectionError:
                return False

        _wait("JupyterHub", up, 120, log_path)
        print(f"hub up at {time.monotonic() - started:.1f} s")
        h.start((INSTRUCTOR, *STUDENTS))
        pids = h.pids()
        registering.result()
        print(f"hub, three servers and the course's gradebook up in {time.monotonic() - started:.1f} s")
        yield h
    finally:
        pids = pids or _quiet(h.pids, [])
        for name in h.users:  # the hub stops its servers; then the hub and its proxy (one process group)
            _quiet(lambda: h.admin.delete(f"{h.url}/hub/api/users/{name}/server", timeout=30))
        _stop(proc)
        log.close()
        for pid in pids:  # a server the hub did not stop in time (its own session: LocalProcessSpawner's)
            if b"jupyterhub-singleuser" in _quiet(lambda: Path(f"/proc/{pid}/cmdline").read_bytes()):
                _quiet(lambda: os.killpg(pid, 9))
        shutil.rmtree(tmp, ignore_errors=True)


def _register(course: Course, tmp: Path) -> None:
    """Both assignments in the instructor's gradebook (autograde needs the notebooks and test cells there),
    with release/ kept exactly as committed."""
    for each in course.assignments():
        keep = tmp / "release-as-committed"
        shutil.copytree(each.release, keep)
        generate_assignment(each)
        shutil.rmtree(each.release)
        shutil.move(keep, each.release)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _quiet(f, default=b""):
    try:
        return f()
    except Exception:  # clean-up goes on whatever one step raises
        return default


@pytest.fixture(scope="module")
def released(hub):
    """Both assignments released from formgrader (its REST API, as the Release button does)."""
    for a in ASSIGNMENTS:
        out = hub.server(INSTRUCTOR, "POST", f"formgrader/api/assignment/{a}/release")
        assert out["success"], out
    listed = hub.server("alice", "GET", "assignments", params={"course_id": COURSE_ID})
    assert listed["success"], listed
    assert {x["assignment_id"]: x["status"] for x in listed["value"]} == {a: "released" for a in ASSIGNMENTS}
    return hub


def _work(hub, student: str, assignment: str) -> list[str]:
    """The student fills the solution cells of the notebooks they fetched and saves them (contents API):
    alice the model solutions, bob with the typical mistake of each notebook that has one."""
    course = Course(ROOT).for_assignment(assignment)
    names = []
    for item in hub.server(student, "GET", f"api/contents/{assignment}")["content"]:
        if not item["name"].endswith(".ipynb"):
            continue
        name = item["name"].removesuffix(".ipynb")
        nb = nbformat.from_dict(hub.server(student, "GET", f"api/contents/{item['path']}")["content"])
        solutions = solution_cells(course, name)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in solutions:
                cell.source = solutions[gid]
        if student == "bob" and name in BOBS_MISTAKES:
            nb = apply_mistake(nb, BOBS_MISTAKES[name])
        hub.server(student, "PUT", f"api/contents/{item['path']}",
                   json={"type": "notebook", "format": "json", "content": nb})
        names.append(name)
    return sorted(names)


def _action(hub, student: str, action: str, assignment: str) -> list[dict]:
    out = hub.server(student, "POST", f"assignments/{action}", data={"course_id": COURSE_ID, "assignment_id": assignment})
    assert out["success"], (student, action, assignment, out)
    return [x for x in out["value"] if x["assignment_id"] == assignment]


def _lost(course: Course, assignment: str, student: str, notebook: str) -> tuple[set[str], float, float]:
    """(test cells that lost points, autograded points earned, autograded points possible) of one graded
    notebook, from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(notebook, assignment, student)
        auto = [g for g in nb.grades if g.auto_score is not None]
        return ({g.name for g in auto if g.auto_score < g.max_score}, sum(g.auto_score for g in auto),
                sum(g.max_score for g in auto))


def test_a_class_on_the_hub_from_release_to_feedback(released):
    hub, course, t0 = released, released.course, time.monotonic()
    notebooks = {}
    for student in STUDENTS:
        for a in ASSIGNMENTS:
            [fetched] = _action(hub, student, "fetch", a)
            assert fetched["status"] == "fetched", fetched
            notebooks[a] = _work(hub, student, a)
            assert notebooks[a] == Course(ROOT).for_assignment(a).notebook_names()
            [submitted] = [x for x in _action(hub, student, "submit", a) if x["status"] == "submitted"]
            assert submitted["submissions"], submitted
    for a in ASSIGNMENTS:
        out = hub.server(INSTRUCTOR, "POST", f"formgrader/api/assignment/{a}/collect")
        assert out["success"], out
        for student in STUDENTS:
            got = sorted(p.stem for p in (course.submitted / student / a).glob("*.ipynb"))
            assert got == notebooks[a], (student, a, got, out["log"], sorted(os.listdir(hub.exchange / COURSE_ID / "inbound")),
                                         sorted(str(p.relative_to(course.root)) for p in course.root.glob("submitted/*/*")))
    t_exchange = time.monotonic() - t0
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_DB_URL"}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    for a in ASSIGNMENTS:  # as the instructor does in a terminal of their server: sandboxed, then feedback
        p = subprocess.run([str(BIN / "attnlab"), "autograde", "--assignment", a, "--notebook", GRADED[a],
                            "--feedback"], cwd=course.root, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    t_graded = time.monotonic() - t0
    scores = {}
    for a in ASSIGNMENTS:
        for student in STUDENTS:
            for name in [GRADED[a]]:
                lost, earned, possible = _lost(course, a, student, name)
                expected = set(BOBS_MISTAKES[name].fails) if student == "bob" and name in BOBS_MISTAKES else set()
                assert possible > 0 and lost == expected, (student, name, lost, expected)
                scores[student, name] = f"<b>Autograded:</b> {earned:g} / {possible:g}"  # as the feedback says it
        out = hub.server(INSTRUCTOR, "POST", f"formgrader/api/assignment/{a}/release_feedback")
        assert out["success"], out
    for student in STUDENTS:
        for a in ASSIGNMENTS:
            [mine] = [x for x in _action(hub, student, "fetch_feedback", a) if x["status"] == "submitted"]
            [submission] = mine["submissions"]
            # per notebook: the submission's own flag says "every notebook has feedback", and one was graded
            [graded] = [nb for nb in submission["notebooks"] if nb["notebook_id"] == GRADED[a]]
            assert graded["has_local_feedback"] and not graded["feedback_updated"], submission
            pages = {Path(p).stem: Path(p) for p in (hub.home / student / a / "feedback").glob("*/*.html")}
            assert sorted(pages) == [GRADED[a]], (student, a, sorted(pages))
            for name, page in pages.items():  # every notebook has answers graded by hand: the line is there
                assert scores[student, name] in page.read_text(), (student, name, scores[student, name])
    print(f"exchange (fetch, work, submit, collect): {t_exchange:.1f} s; autograde and feedback: "
          f"{t_graded - t_exchange:.1f} s; feedback released and fetched: {time.monotonic() - t0 - t_graded:.1f} s")


def test_student_sees_the_assignments_in_the_assignments_tab(released):
    """bob logs in through the hub's login page and opens Nbgrader > Assignment List in JupyterLab."""
    chromium = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright's Python package is not installed (pip install -e '.[test]')")

    with tempfile.TemporaryDirectory(prefix="attnlab-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(profile, executable_path=chromium, headless=True,
                                                        args=CHROMIUM_FLAGS)
        context.set_default_timeout(90_000)
        page = context.pages[0] if context.pages else context.new_page()
        try:
            page.goto(f"{released.url}/hub/login")
            page.fill("#username_input", "bob")
            page.fill("#password_input", released.password)
            page.click("#login_submit")
            page.goto(f"{released.url}/user/bob/lab")
            page.wait_for_selector(".lm-MenuBar-itemLabel")
            _menu(page, "Nbgrader", "Assignment List")
            listed = page.locator("#released_assignments_list, #fetched_assignments_list, #submitted_assignments_list")
            for a in ASSIGNMENTS:
                listed.get_by_text(a, exact=True).first.wait_for()
            page.screenshot(path=str(released.tmp / "assignments-tab.png"))
        finally:
            context.close()


# ------------------------------------------------------------------ attnlab doctor's hub check
def test_doctor_hub_check_accepts_the_hub_it_ran_and_names_its_exchange(released, monkeypatch):
    """What `attnlab doctor --hub` reports in the instructor's terminal on the hub above."""
    from attnlab.tools import doctor

    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(released.config_path))  # the servers' nbgrader config
    monkeypatch.chdir(released.course.root)
    checks = doctor.check_hub()
    assert [(c.name, c.status) for c in checks] == [("hub: exchange", "OK"), ("hub: course folders", "OK"),
                                                    ("hub: nbgrader extensions", "OK")], checks
    assert str(released.exchange) in checks[0].detail


def test_doctor_hub_check_fails_what_stops_students_and_says_how_to_fix_it(tmp_path):
    from attnlab.tools.hub_check import check_exchange, check_hub_extensions

    ex = tmp_path / "exchange"
    [missing] = check_exchange(str(ex), COURSE_ID)
    assert missing.status == "FAIL" and "does not exist" in missing.detail and "chmod 777" in missing.advice
    ex.mkdir()
    ex.chmod(0o755)  # what a plain mkdir gives: students cannot submit
    [closed] = check_exchange(str(ex), COURSE_ID)
    assert closed.status == "FAIL" and "0o755" in closed.detail and closed.advice == f"sudo chmod 777 {ex}"
    ex.chmod(0o777)
    for name, mode in (("outbound", 0o755), ("inbound", 0o2733), ("feedback", 0o711)):  # as nbgrader's release
        (ex / COURSE_ID / name).mkdir(parents=True)
        (ex / COURSE_ID / name).chmod(mode)
    assert [c.status for c in check_exchange(str(ex), COURSE_ID)] == ["OK", "OK"]
    (ex / COURSE_ID / "inbound").chmod(0o2777)  # students could list each other's submissions
    assert check_exchange(str(ex), COURSE_ID)[1].status == "WARN"
    assert check_exchange(str(ex), COURSE_ID, groupshared=True)[1].status == "OK"
    (ex / COURSE_ID / "outbound").chmod(0o700)  # students cannot fetch
    assert check_exchange(str(ex), COURSE_ID)[1].status == "FAIL"
    [no_course] = check_exchange(str(ex), "")[1:]
    assert no_course.status == "WARN" and "course_id" in no_course.advice
    listing = "\n".join(f"    nbgrader.server_extensions.{n} enabled" for n in ("formgrader", "course_list"))
    [off] = check_hub_extensions(listing + "\n    nbgrader.server_extensions.assignment_list disabled")
    assert off.status == "FAIL" and "assignment_list" in off.detail and "course_list" not in off.detail
    [unlisted] = check_hub_extensions("(could not run jupyter server extension list: timed out)")
    assert unlisted.status == "FAIL" and "timed out" in unlisted.detail and "jupyter server extension list" in unlisted.advice


def test_doctor_runs_the_hub_check_where_a_hub_is_detected_or_asked_for(monkeypatch):
    from attnlab.tools import doctor, hub_check

    assert hub_check.hub_detected({"JUPYTERHUB_USER": "alice"})  # a hub's server or terminal
    monkeypatch.setattr(doctor, "check_hub", lambda: [doctor.Check("hub: exchange", doctor.OK, "checked")])
    monkeypatch.setattr(doctor, "check_sandbox", lambda: doctor.Check("grading sandbox", doctor.OK, "skipped"))
    names = lambda **kw: {c.name for c in doctor.run_checks(smoke=False, jupyter=False, **kw)}  # noqa: E731
    monkeypatch.setattr(hub_check, "hub_detected", lambda: False)
    assert "hub: exchange" not in names() and "hub: exchange" in names(hub=True)
    monkeypatch.setattr(hub_check, "hub_detected", lambda: True)
    assert "hub: exchange" in names() and "hub: exchange" not in names(hub=False)
