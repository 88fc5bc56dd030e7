"""One line of ``attnlab doctor``'s report: a :class:`Check` and its statuses.

Below the doctor and its JupyterHub checks (:mod:`attnlab.tools.hub_check`), which both make them, so
neither imports the other for them (:mod:`attnlab.tools.doctor` re-exports the names).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Check", "OK", "NOTE", "WARN", "FAIL"]

#: A check's status, best first: ready; worth knowing; works, with a limit; the course cannot run.
OK, NOTE, WARN, FAIL = "OK", "NOTE", "WARN", "FAIL"


@dataclass
class Check:
    """One check's result: ``name`` (what was checked), ``status`` (:data:`OK`, :data:`NOTE`, :data:`WARN`
    or :data:`FAIL`), ``detail`` (what was found) and ``advice`` (what to do when it is not OK)."""

    name: str
    status: str
    detail: str
    advice: str = ""
