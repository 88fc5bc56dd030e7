"""The kernels a grading worker starts: their environment, their scratch folder's files, and one spare.

:class:`KernelStart` is a part of :class:`attnlab.grading.worker.execute.GradingExecute` (a mixin: it shares
the preprocessor's kernel manager and traits, set in nbgrader_config.py as ``c.GradingExecute.<trait>``):
which kernel manager starts the kernel (sandboxed or not, with the GPU or not), its environment and memory,
what it finds in its scratch folder, and the spare kernel kept warm for the next notebook (started with
torch and the course's package imported, in a sandbox and scratch folder no learner code has seen).
Every kernel's pid goes to the worker's pid file (:func:`record_pid`), so a killed worker's kernels are
killed too (:func:`attnlab.grading.host.pool.kill_kernels`).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import stat
import tempfile

from nbclient.util import run_sync
from traitlets import Bool, Float, HasTraits, Integer

from ...core.device import FORCE_ENV
from ..course import THREAD_VARS, uses_gpu
from ..sandbox.proctree import PIDFILE_ENV, process_start
from .. import sandbox as _sandbox
from ..sandbox import tasks as _tasks

_MAX_COPY = 64 * 2**20  # files larger than this are not copied into the kernel's scratch folder
#: What a spare kernel imports while it waits (names deleted again: the notebook starts clean).
_PRELOAD = "import torch, attnlab.verify, attnlab.nbload, attnlab.grading.kernel.guard; del torch, attnlab"
_SPARE = None  # a kernel manager whose kernel is started and waiting, or None


def _copy_in(src: str, dest: str, account: int | None) -> None:
    """Copy ``src`` into a kernel's scratch folder as a new file (never through a link or over a file
    already there: such a name is skipped), then hand it to the kernel's account."""
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return
    with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    _sandbox.hand_over(dest, account)


def _plain_file(path: str) -> bool:
    """A regular file with one name, not a link or a hard link: the grader copies as root, and a link in
    a submission folder could point at a file only root may read, which the kernel would then read
    from its scratch folder."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def record_pid(km) -> None:
    """Append the kernel's pid, start time and folders to the worker's pid file (``$ATTNLAB_KERNEL_PIDFILE``)."""
    path = os.environ.get(PIDFILE_ENV)
    pid = getattr(getattr(km, "provisioner", None), "pid", None)
    if path and pid:
        folders = [km.folder, *map(str, km.cgroups)] \
            if isinstance(km, _sandbox.SandboxedKernelManager) else []
        with open(path, "a") as f:
            f.write(" ".join([f"{pid}:{process_start(pid) or ''}", *folders]) + "\n")


def _kill(km) -> None:
    pid = getattr(getattr(km, "provisioner", None), "pid", None)
    try:
        if pid:
            os.killpg(pid, signal.SIGKILL)
    except Exception:  # noqa: BLE001 (gone already; or no process groups on this system)
        pass
    try:
        km.cleanup_connection_file()
    except Exception:  # noqa: BLE001
        pass
    if isinstance(km, _sandbox.SandboxedKernelManager):
        km.remove_folders()


def spare():
    """The kernel manager whose kernel is started and waiting for the next notebook, or None."""
    return _SPARE


@atexit.register
def drop_spare() -> None:
    """Kill the waiting spare kernel and remove its folders, if there is one (also run at exit)."""
    global _SPARE
    km, _SPARE = _SPARE, None
    if km is not None:
        _kill(km)




class KernelStart(HasTraits):
    """Kernel start and the spare kernel of :class:`~attnlab.grading.worker.execute.GradingExecute`
    (module docstring)."""

    memory_limit_gb = Float(8.0, help="Memory of a sandboxed kernel as a whole, its children, shared memory and "
                                      "scratch folder included (a memory cgroup), and each of its processes' "
                                      "address space on the CPU (0: none)").tag(config=True)
    kernel_threads = Integer(1, help="CPU threads of the kernel's pools (OMP_NUM_THREADS and the BLAS "
                                     "equivalents; 0: the grader's own). The tests' tensors are tiny: a "
                                     "second thread only spin-waits, costing CPU and no time saved "
                                     "(notes/grading/2026-12-01/profile.md)").tag(config=True)
    max_tasks = Integer(_tasks.MAX_TASKS, help="Processes and threads one sandboxed kernel may have (0: no "
                                               "bound; attnlab.grading.sandbox.tasks)").tag(config=True)
    prewarm = Bool(True, help="Keep a spare kernel started for the next notebook").tag(config=True)
    fork_server = Bool(True, help="Fork sandboxed kernels from a process that imported torch once, where "
                                  "kernels run as accounts of their own (attnlab.grading.sandbox.forkserver; "
                                  "ATTNLAB_FORK_SERVER=0 also turns it off)").tag(config=True)
    sandbox = Bool(True, help="Run the kernel in a bubblewrap sandbox (attnlab.grading.sandbox); "
                              "False only on the instructor's explicit choice").tag(config=True)

    def _memory_bytes(self) -> int:
        """What a sandboxed kernel may hold as a whole (its memory cgroup): ``memory_limit_gb``, 0 for none."""
        return int(max(self.memory_limit_gb, 0) * 2**30)

    def _kernel_env(self, gpu: bool = True) -> dict | None:
        """The kernel's environment: the grader's, with thread pools of ``kernel_threads`` and, when
        ``gpu`` is False, no CUDA device (and the course's CPU mode); None to leave it to
        jupyter_client (``kernel_threads`` 0 and a GPU)."""
        if self.kernel_threads < 1 and gpu:
            return None
        env = dict(os.environ)
        if self.kernel_threads >= 1:
            env.update({var: str(self.kernel_threads) for var in THREAD_VARS})
        if not gpu:
            env.update({"CUDA_VISIBLE_DEVICES": "", FORCE_ENV: "cpu"})
        return env

    def _gpu_plan(self, resources: dict) -> tuple[bool, bool]:
        """Whether this notebook's kernel gets the GPU, and whether the next one's will (for the
        spare): the next notebook of the submission folder in nbgrader's sorted order, else the
        first one (the next student's). Without a notebook name (a plain nbconvert run): the GPU."""
        name = str(resources.get("unique_key") or "")
        if not name:
            return True, True
        names = sorted(n[:-6] for n in self._listing(self._submission_folder(resources)) if n.endswith(".ipynb"))
        later = [n for n in names if n > name]
        upcoming = later[0] if later else (names[0] if names else name)
        return uses_gpu(name), uses_gpu(upcoming)

    @staticmethod
    def _listing(folder: str) -> list[str]:
        try:
            return os.listdir(folder)
        except OSError:
            return []

    def _submission_folder(self, resources: dict) -> str:
        """The student's submitted folder (nbgrader's), else the folder nbgrader says the notebook is in."""
        here = resources.get("metadata", {}).get("path") or "."
        info = resources.get("nbgrader", {})
        if info.get("student") and info.get("assignment"):
            from nbgrader.coursedir import CourseDirectory

            coursedir = CourseDirectory(config=self.config)
            folder = coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"])
            if os.path.isdir(folder):
                return folder
        return here

    def _kernel_name(self, nb) -> str:
        return self.kernel_name or nb.metadata.get("kernelspec", {}).get("name") or "python3"

    def _manager_class(self):
        return _sandbox.SandboxedKernelManager if self.sandbox else self.kernel_manager_class

    def _take_spare(self, nb):
        """The spare kernel, if one is waiting for this kind of kernel (GPU or not included) and still alive."""
        global _SPARE
        km, _SPARE = _SPARE, None
        if km is None:
            return None
        try:
            sandboxed = isinstance(km, _sandbox.SandboxedKernelManager)
            if (km.kernel_name == self._kernel_name(nb) and sandboxed == self.sandbox
                    and getattr(km, "attnlab_gpu", True) == self._gpu and run_sync(km.is_alive)()):
                return km
        except Exception:  # noqa: BLE001
            pass
        _kill(km)
        return None

    def _start_spare(self, nb) -> None:
        """Start the next notebook's kernel now; it imports torch and the course's package while it waits."""
        global _SPARE
        if not self.prewarm or _SPARE is not None:
            return
        try:
            kwargs = ({"gpu": self._next_gpu, "max_tasks": self.max_tasks, "fork_server": self.fork_server,
                       "memory_bytes": self._memory_bytes()} if self.sandbox else {})
            km = self._manager_class()(kernel_name=self._kernel_name(nb), config=self.config, **kwargs)
            km.attnlab_gpu = self._next_gpu
            extra = [*self.extra_arguments, f"--IPKernelApp.exec_lines={json.dumps([_PRELOAD])}"]
            if not any(a.startswith("--HistoryManager.hist_file") for a in extra):
                extra.append("--HistoryManager.hist_file=:memory:")
            env = self._kernel_env(self._next_gpu)
            env = {"env": env} if env is not None else {}
            run_sync(km.start_kernel)(extra_arguments=extra, cwd=tempfile.gettempdir(), **env)
        except Exception as exc:  # noqa: BLE001 (no spare: the next notebook starts its own kernel)
            self.log.warning("attnlab: could not start a spare kernel: %s", exc)
            return
        record_pid(km)
        _SPARE = km

    def _fill_run_dir(self, run: str, resources: dict) -> None:
        """Copy into the kernel's scratch folder the submission's notebooks, and the instructor's
        other files that nbgrader copied into the autograded folder."""
        here = resources.get("metadata", {}).get("path") or "."
        account = getattr(self.km, "account", None)  # a root grader's kernel reads them as its own account
        try:
            submitted = self._submission_folder(resources)
            for name in os.listdir(here):
                src = os.path.join(here, name)
                # nbgrader copied the submission's files here following links (plain `nbgrader autograde`
                # does not refuse them first, as `attnlab autograde` does): judge the file handed in
                origin = os.path.join(submitted, name)
                handed_in = origin == src or not os.path.lexists(origin) or _plain_file(origin)
                if _plain_file(src) and handed_in and not name.endswith(".ipynb") and os.path.getsize(src) < _MAX_COPY:
                    _copy_in(src, os.path.join(run, name), account)
            for name in os.listdir(submitted):
                src = os.path.join(submitted, name)
                if name.endswith(".ipynb") and _plain_file(src) and os.path.getsize(src) < _MAX_COPY:
                    _copy_in(src, os.path.join(run, name), account)
        except OSError:
            pass
