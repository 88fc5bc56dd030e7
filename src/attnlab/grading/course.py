"""Where things live in a course directory (the repository root, or a copy of it)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

#: Environment variables that set CPU thread pools (torch reads OMP_NUM_THREADS): each worker's own, set
#: by the plan (:mod:`.host.parallel`); its kernels get ``GradingExecute.kernel_threads`` (1) in the same variables.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: The one GPU device node (``/dev/nvidiaN``) a worker's kernels may open, read by the sandbox
#: (:func:`.sandbox.gpu_nodes`); unset: every GPU's node is bound.
GPU_DEVICE_ENV = "ATTNLAB_GPU_DEVICE"

#: The course secret (leaderboard ids, the tests' seed keys) when set; else ``.attnlab-secret`` in the
#: course folder. Never given to a kernel (:func:`.sandbox.kernel_env`).
SECRET_ENV = "ATTNLAB_COURSE_SECRET"

ASSIGNMENT = "attention_kernels"
#: The second assignment (notebooks 07-09), released after the first one is graded.
BEYOND = "attention_kernels_beyond"
#: Every assignment, in course order.
ASSIGNMENTS = (ASSIGNMENT, BEYOND)
#: Notebook numbers of the second assignment; every other number (01-06, and the test suite's
#: own 9x notebooks such as samples/abuse/99_triton_probe.py) belongs to the lab.
_BEYOND_NUMBERS = range(7, 90)
COURSE_ID = "attention-kernels"


def assignment_of(notebook: str) -> str:
    """The assignment a course notebook belongs to, from its number (``"07_triton_backward"`` -> BEYOND).

    Raises:
        ValueError: the name does not start with a two-digit number.
    """
    head = notebook.split("_", 1)[0]
    if not (len(head) == 2 and head.isdigit()):
        raise ValueError(f"{notebook!r} is not a course notebook name (NN_name)")
    return BEYOND if int(head) in _BEYOND_NUMBERS else ASSIGNMENT


#: Notebooks whose every graded check runs on the CPU: the PyTorch notebooks 01-03 (float64 references,
#: small tensors, no Triton) and 06 (numbers checked; its measurements skip under the grader). Their
#: kernels are graded with the GPU hidden (:func:`uses_gpu`).
_CPU_ONLY_NUMBERS = (1, 2, 3, 6)


def uses_gpu(notebook: str) -> bool:
    """Whether a graded notebook's kernel is given the host's GPU.

    False for 01-03 and 06: none of their graded checks touches a GPU, so hiding it grades them
    exactly as on a CPU host, spares each kernel CUDA's start-up (seconds on a busy GPU host), and
    keeps an edited measurement cell of 06 off the GPU. True for every other name, the Triton
    notebooks and unknown names alike.
    """
    head = notebook.split("_", 1)[0]
    return not (len(head) == 2 and head.isdigit() and int(head) in _CPU_ONLY_NUMBERS)


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
    """Paths of one course directory and one of its assignments; ``root`` holds ``nbgrader_config.py``.

    ``assignment`` selects what ``source``, ``release``, ``notebook_names`` and the graders see;
    :meth:`for_assignment` gives the same directory seen through another assignment.
    """

    root: Path
    assignment: str = ASSIGNMENT

    @classmethod
    def find(cls, start: str | os.PathLike | None = None, assignment: str = ASSIGNMENT) -> "Course":
        """The course directory at or above ``start`` (default: the working directory)."""
        if assignment not in ASSIGNMENTS:
            raise SystemExit(f"attnlab: unknown assignment {assignment!r}; the course has {', '.join(ASSIGNMENTS)}")
        here = Path(start or os.getcwd()).resolve()
        for d in (here, *here.parents):
            if (d / "nbgrader_config.py").is_file() and (d / "notebooks").is_dir():
                return cls(d, assignment)
        raise SystemExit(f"attnlab: no course directory (nbgrader_config.py beside notebooks/) at or above {here}")

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def source(self) -> Path:
        return self.root / "source" / self.assignment

    @property
    def release(self) -> Path:
        return self.root / "release" / self.assignment

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
        return [n for n in self.all_notebook_names() if assignment_of(n) == self.assignment]

    def all_notebook_names(self) -> list[str]:
        """Every notebook of notebooks/, whatever its assignment, in course order."""
        return sorted(p.stem for p in self.notebooks.glob("[0-9][0-9]_*.py"))

    def for_assignment(self, assignment: str) -> "Course":
        """This course directory, seen through ``assignment``."""
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"unknown assignment {assignment!r}; the course has {', '.join(ASSIGNMENTS)}")
        return replace(self, assignment=assignment)

    def assignments(self) -> list["Course"]:
        """This directory seen through each assignment that has notebooks, in course order."""
        present = {assignment_of(n) for n in self.all_notebook_names()}
        return [self.for_assignment(a) for a in ASSIGNMENTS if a in present]

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


def course_secret(course: Course) -> bytes:
    """The course secret: ``$ATTNLAB_COURSE_SECRET``, else ``.attnlab-secret`` in the course folder
    (made on first use, readable by its owner only; keep it out of version control)."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV].encode()
    path = course.root / ".attnlab-secret"
    if not path.exists():
        # written aside, then linked into place: grading workers that start together (each notebook's
        # seed key needs it) all read the one secret that won, never a file still being written
        aside = path.with_name(f".attnlab-secret.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(aside)
    return path.read_text().strip().encode()
