"""``attnlab doctor``'s JupyterHub checks: is nbgrader's exchange usable, and are the extensions that
use it (the Assignments tab, formgrader) enabled? Run where a hub is detected (a server started by
JupyterHub, or nbgrader's default exchange folder present) or with ``attnlab doctor --hub``.

The exchange is read from nbgrader's configuration exactly as the Assignments tab reads it: every
``nbgrader_config.py`` on Jupyter's config path (``/etc/jupyter``, ``~/.jupyter``, the environment's,
``JUPYTER_CONFIG_PATH``), then the one in the current folder. The permissions checked are the ones
nbgrader's own release sets and relies on (nbgrader 0.9.6, ``nbgrader.exchange.default``).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .report import FAIL, OK, WARN, Check

__all__ = ["hub_detected", "exchange_settings", "check_exchange", "check_hub_extensions"]

#: nbgrader 0.9's default Exchange.root, and the folder docs/hub.md (and older nbgrader guides) name
EXCHANGE_FOLDERS = ("/usr/local/share/nbgrader/exchange", "/srv/nbgrader/exchange")
#: Server extensions by who needs them: students the Assignments and Courses tabs, instructors formgrader.
HUB_EXTENSIONS = {"assignment_list": "the Assignments tab (fetch, submit, fetch feedback)",
                  "course_list": "the Courses tab",
                  "formgrader": "formgrader (release, collect, release feedback)"}


def hub_detected(environ=os.environ) -> bool:
    """Whether this looks like a hub: a server JupyterHub started (it sets JUPYTERHUB_* variables in
    every single-user server and its terminals), or an exchange folder in a usual place exists."""
    return (bool(environ.get("JUPYTERHUB_USER") or environ.get("JUPYTERHUB_API_URL"))
            or any(os.path.isdir(f) for f in EXCHANGE_FOLDERS))


def exchange_settings(cwd: str | os.PathLike | None = None) -> tuple[str, str, bool]:
    """(Exchange.root, CourseDirectory.course_id, CourseDirectory.groupshared) as nbgrader's Assignments
    tab sees them from ``cwd`` (default: the current folder). Imports nbgrader (about a second)."""
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.apps import NbGrader
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.exchange import Exchange

    app = NbGrader()
    app.config_file_paths.extend([*jupyter_config_path(), str(cwd or os.getcwd())])
    app.load_config_file()
    coursedir = CourseDirectory(config=app.config)
    return Exchange(config=app.config, coursedir=coursedir).root, coursedir.course_id, coursedir.groupshared


def _mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def check_exchange(root: str, course_id: str, groupshared: bool = False) -> list[Check]:
    """The exchange folder and, once the course has released something, its course folders: the
    permission bits nbgrader's release sets, which every student's fetch and submit need.

    Returns a list of :class:`attnlab.tools.report.Check`; FAIL where students could not fetch or submit,
    WARN where they could read each other's submissions.
    """
    ex = Path(root)
    fix = f"sudo mkdir -p {ex} && sudo chmod 777 {ex}"
    if not ex.is_dir():
        return [Check("hub: exchange", FAIL, f"nbgrader's exchange folder {ex} does not exist: nothing can be "
                      "released, fetched or submitted",
                      f"Create it on the machine (or the shared volume) every server mounts: {fix}; or name "
                      "another in /etc/jupyter/nbgrader_config.py (c.Exchange.root = ...).")]
    if stat.S_IMODE(ex.stat().st_mode) & 0o777 != 0o777:
        return [Check("hub: exchange", FAIL, f"{ex} has mode {_mode(ex)}; nbgrader needs it readable, writable and "
                      "searchable by everyone (0o777): a student's fetch and submit fail otherwise",
                      f"sudo chmod 777 {ex}")]
    checks = [Check("hub: exchange", OK, f"{ex} ({_mode(ex)})")]
    if not course_id:
        checks.append(Check("hub: course id", WARN, "no course id in nbgrader's configuration: release and "
                            "the Assignments tab need one",
                            "Set c.CourseDirectory.course_id in /etc/jupyter/nbgrader_config.py (the course's "
                            "nbgrader_config.py names it \"attention-kernels\")."))
        return checks
    course = ex / course_id
    if not course.is_dir():
        checks.append(Check("hub: course folders", OK, f"{course} is created by the first release"))
        return checks
    # what each folder must allow others (students), and must not: (folder, needed, forbidden, why)
    needs = [("outbound", stat.S_IROTH | stat.S_IXOTH, 0, "students list and fetch released assignments"),
             ("inbound", stat.S_IWOTH | stat.S_IXOTH, 0 if groupshared else stat.S_IROTH,
              "students submit (and must not list each other's submissions)"),
             ("feedback", stat.S_IXOTH, 0, "students fetch their own feedback by name")]
    bad, risky = [], []
    for name, needed, forbidden, why in needs:
        path = course / name
        if not path.is_dir():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & needed != needed:
            bad.append(f"{name} is {_mode(path)} ({why})")
        elif mode & forbidden:
            risky.append(f"{name} is {_mode(path)}: every student can list the others' submissions")
    if bad:
        checks.append(Check("hub: course folders", FAIL, "; ".join(bad),
                            f"Release again as the instructor (nbgrader sets these modes), or: chmod 755 "
                            f"{course}/outbound; chmod 2733 {course}/inbound; chmod 711 {course}/feedback"))
    elif risky:
        checks.append(Check("hub: course folders", WARN, "; ".join(risky), f"chmod 2733 {course}/inbound"))
    else:
        checks.append(Check("hub: course folders", OK, f"{course}: outbound, inbound and feedback as nbgrader sets them"))
    return checks


def check_hub_extensions(server_extensions: str) -> list[Check]:
    """The nbgrader server extensions a hub's servers need, from ``jupyter server extension list``'s output."""
    if "nbgrader.server_extensions" not in server_extensions:  # no listing at all (timed out, no jupyter)
        return [Check("hub: nbgrader extensions", FAIL, f"no nbgrader extension listed: {server_extensions[-300:].strip()}",
                      "Run `jupyter server extension list` in the environment the hub's servers run; install "
                      "nbgrader there (pip install -e '.[course]').")]
    off = [f"{name} ({why})" for name, why in HUB_EXTENSIONS.items()
           if not re.search(rf"nbgrader\.server_extensions\.{name}\s+enabled", server_extensions)]
    if off:
        return [Check("hub: nbgrader extensions", FAIL, "not enabled: " + ", ".join(off),
                      "jupyter server extension enable --sys-prefix nbgrader.server_extensions.<name> in the "
                      "environment the hub's servers run (students may leave formgrader disabled).")]
    return [Check("hub: nbgrader extensions", OK, "assignment_list, course_list and formgrader enabled")]


def check_hub(listing: str, cwd: str | os.PathLike | None = None) -> list[Check]:
    """Every hub check: the exchange nbgrader's configuration names, and the extensions in ``listing``."""
    try:
        root, course_id, groupshared = exchange_settings(cwd)
    except ImportError as exc:
        return [Check("hub: exchange", FAIL, f"nbgrader is not importable ({exc})",
                      "pip install -e '.[course]' in the environment the hub's servers run.")]
    return [*check_exchange(root, course_id, groupshared), *check_hub_extensions(listing)]
