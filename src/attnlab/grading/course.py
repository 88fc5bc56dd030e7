"""Where things live in a course directory (the repository root, or a copy of it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ASSIGNMENT = "attention_kernels"
COURSE_ID = "attention-kernels"


def tool_env(env: dict | None = None) -> dict:
    """A copy of ``env`` (default: this process's) with this interpreter's bin folder first on PATH.

    nbgrader shells out to ``alembic`` when it creates a gradebook, and fails with
    FileNotFoundError when the virtualenv holding it is not activated.
    """
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass(frozen=True)
class Course:
    """Paths of one course directory; ``root`` holds ``nbgrader_config.py``."""

    root: Path

    @classmethod
    def find(cls, start: str | os.PathLike | None = None) -> "Course":
        """The course directory at or above ``start`` (default: the working directory)."""
        here = Path(start or os.getcwd()).resolve()
        for d in (here, *here.parents):
            if (d / "nbgrader_config.py").is_file() and (d / "notebooks").is_dir():
                return cls(d)
        raise SystemExit(f"attnlab: no course directory (nbgrader_config.py beside notebooks/) at or above {here}")

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def source(self) -> Path:
        return self.root / "source" / ASSIGNMENT

    @property
    def release(self) -> Path:
        return self.root / "release" / ASSIGNMENT

    @property
    def submitted(self) -> Path:
        return self.root / "submitted"

    @property
    def autograded(self) -> Path:
        return self.root / "autograded"

    @property
    def samples(self) -> Path:
        return self.root / "samples"

    def notebook_names(self) -> list[str]:
        """The assignment's notebooks, by name without extension, in course order."""
        return sorted(p.stem for p in self.notebooks.glob("[0-9][0-9]_*.py"))

    def nbgrader(self, *args: str, timeout: float | None = None, env: dict | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        """Run ``nbgrader ARGS`` in this course directory with this interpreter.

        The interpreter's bin folder goes first on PATH: nbgrader shells out to ``alembic`` when it
        creates a gradebook, and fails with FileNotFoundError when the virtualenv is not activated.
        """
        full_env = tool_env(env)
        # A session of its own, so a timeout can kill nbgrader *and* the kernel it started.
        proc = subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=self.root, env=full_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise NbgraderTimeout(f"nbgrader {' '.join(args)} ran past {timeout:g} s and was killed") from None
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check and result.returncode != 0:
            raise RuntimeError(f"nbgrader {' '.join(args)} failed (exit {result.returncode}):\n"
                               f"{out[-4000:]}\n{err[-4000:]}")
        return result


class NbgraderTimeout(RuntimeError):
    """An nbgrader command ran past its wall-clock limit; it and its kernels were killed."""
