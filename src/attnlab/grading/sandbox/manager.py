"""The kernel manager whose kernels run in the sandbox (:class:`SandboxedKernelManager`): bwrap starts
them, or the fork server forks them into a sandbox bwrap built around a placeholder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

from . import tasks as _tasks
from .accounts import hand_over, kernel_account
from .bwrap import wrap
from .devices import kernel_groups
from .environment import kernel_env, kernel_environment
from .scratch import remove_tree, scratch_bytes, seed_caches
from .syscalls import seccomp_program

#: oom_score_adj of a kernel's processes (:data:`.tasks.KERNEL_OOM_SCORE`).
KERNEL_OOM_SCORE = _tasks.KERNEL_OOM_SCORE

#: Seconds bwrap may take to build a sandbox for the fork server's kernel and start its placeholder.
SANDBOX_START_TIMEOUT = 30.0
#: Why the fork server could not start a kernel, each said once per grading process.
FORK_REFUSALS_SAID: set[str] = set()


def _whole_json(text: bytes) -> bool:
    """Whether ``text`` is one whole JSON value (what bwrap writes on ``--info-fd``: ``child-pid``, the
    host's pid of the sandbox's PID 1, and each namespace's inode number)."""
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels run in a bubblewrap sandbox with a fresh scratch folder each.

    The kernel talks over Unix sockets (``transport = "ipc"``) in a folder of its own, so the
    sandbox needs no network; interrupts go as messages (a signal to bwrap would not reach it).
    """

    # the grader's iopub socket refuses a message past a cap before reading it, and connects again
    # (a cell's 256 MiB print no longer lands whole in the grader's memory: attnlab.grading.worker.iopub)
    client_class = DottedObjectName("attnlab.grading.worker.iopub.CappedKernelClient")
    client_factory = Type(klass="attnlab.grading.worker.iopub.CappedKernelClient")

    def __init__(self, gpu: bool = True, max_tasks: int = _tasks.MAX_TASKS, fork_server: bool = True,
                 memory_bytes: int = _tasks.MEMORY_BYTES, scratch_size: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.fork_server = fork_server  # False: bwrap starts the kernel's own interpreter (see _fork_argv)
        self.forked = False  # whether the running kernel came from the fork server
        self.gpu = gpu  # False: no GPU device node is bound (the caller also hides it in the environment)
        self.scratch_size = scratch_bytes() if scratch_size is None else scratch_size
        # a pids cgroup of its own where this machine allows one (else the guard's RLIMIT_NPROC, or none)
        self.cgroup = _tasks.create(max_tasks)
        # and a memory limit for the kernel as a whole (on cgroup v2 in that same cgroup; on v1 a memory
        # cgroup beside it; None where neither can be made: tasks.describe_memory says why)
        self.memory_cgroup = _tasks.create_memory(memory_bytes, self.cgroup)
        self.cgroups = [c for c in dict.fromkeys([self.cgroup, self.memory_cgroup]) if c is not None]
        self.account = kernel_account()  # None: the grader's own account
        # the grader's own folder (0700): the kernel's scratch and socket folders, which the kernel
        # owns, lie inside it, so no other account reaches them even if the kernel opens them to all;
        # the account's /etc/passwd and /etc/group copies sit in it, out of the kernel's reach
        self.folder = tempfile.mkdtemp(prefix="attnlab-run-")
        self.scratch = os.path.join(self.folder, "scratch")
        self._ipc_dir = os.path.join(self.folder, "ipc")
        os.mkdir(self.scratch, 0o700)
        os.mkdir(self._ipc_dir, 0o700)
        seed_caches(self.scratch)
        self.transport = "ipc"
        self.ip = os.path.join(self._ipc_dir, "kernel")

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = self._kernel_cmd = super().format_kernel_cmd(extra_arguments)
        connection = os.path.realpath(self.connection_file)
        hand_over(connection, self.account)  # written 0600 by the grader: the kernel reads its ports and key
        return self._wrap(cmd)

    def _wrap(self, cmd: list[str], info_fd: int | None = None) -> list[str]:
        return _tasks.enter(self.cgroups, wrap(cmd, self.scratch, self._ipc_dir,
                                               read_only=[os.path.realpath(self.connection_file)], gpu=self.gpu,
                                               account=self.account, etc_dir=self.folder, info_fd=info_fd,
                                               scratch_size=self.scratch_size), oom_score=KERNEL_OOM_SCORE)

    def given_expression(self) -> str:
        """What the grader evaluates in the kernel (user_expressions) before any learner code: the kernel
        copies the files handed to it into its scratch folder (:func:`take_given`); JSON text."""
        return (f"__import__('json').dumps(__import__('attnlab.grading.sandbox', fromlist=['take_given'])"
                f".take_given({self.scratch!r}))")

    def close_ipc(self) -> None:
        """Once the kernel has made its sockets (it answered), take its socket folder back from its account:
        that folder is on the grader's disk, and learner code could otherwise fill it without bound."""
        if self.account is not None:
            os.chown(self._ipc_dir, os.geteuid(), os.getegid())
            os.chmod(self._ipc_dir, 0o711)

    def _fork_argv(self) -> list[str] | None:
        """ipykernel's arguments when the fork server may start this kernel, else None: kernels of a
        root grader (an account of their own, which the server's child switches to as bwrap's kernels
        do), started as ``python -m ipykernel_launcher`` by this very interpreter."""
        from . import forkserver

        cmd = getattr(self, "_kernel_cmd", [])
        if (self.fork_server and forkserver.enabled() and self.account is not None and len(cmd) >= 3
                and cmd[1:3] == ["-m", "ipykernel_launcher"]
                and os.path.realpath(cmd[0]) == os.path.realpath(sys.executable)):
            return cmd[3:]
        return None

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        """Start the kernel: from the fork server where :meth:`_fork_argv` allows (bwrap runs its
        placeholder in the sandbox and the server's fork joins it), else, and whenever that fails,
        bwrap's own ``kernel_cmd``."""
        self.forked = False
        argv = self._fork_argv()
        if argv is not None:
            try:
                why = await self._fork_kernel(argv, kw)
            except Exception as exc:  # noqa: BLE001 (any failure: bwrap starts the kernel)
                why = f"{type(exc).__name__}: {exc}"
            if not why:
                self.forked = True
                return
            if why not in FORK_REFUSALS_SAID:  # a refusal holds for every kernel after: say it once
                FORK_REFUSALS_SAID.add(why)
                self.log.warning("attnlab: the fork server could not start the kernel (%s); bwrap starts it", why)
            if self.provisioner is not None and self.provisioner.has_process:
                await self.provisioner.kill()
                await self.provisioner.wait()
        await super()._async_launch_kernel(kernel_cmd, **kw)

    async def _fork_kernel(self, argv: list[str], kw: dict) -> str:
        """Launch bwrap with the placeholder, then have the fork server start the kernel in it; "" when
        it did, else why not. The blocking steps (the server's first imports, reading the pipes) run
        in a thread, so other kernels' messages on this event loop go on meanwhile."""
        import asyncio

        from . import forkserver

        env = kernel_environment(kw.get("env") or dict(os.environ), self.scratch, self.account)
        server = await asyncio.to_thread(forkserver.server_for, env)
        if server.why:
            return server.why
        info_read, info_write = os.pipe()
        ready_read, ready_write = os.pipe()
        try:
            try:
                holder = self._wrap([sys.executable, "-I", "-S", "-c", forkserver.HOLD, str(ready_write)],
                                    info_fd=info_write)
                await super()._async_launch_kernel(holder, **kw, pass_fds=(info_write, ready_write))
            finally:
                os.close(info_write)
                os.close(ready_write)
            fd, info_read = info_read, None  # read_pipe closes it, whatever happens
            info = json.loads(await asyncio.to_thread(forkserver.read_pipe, fd, SANDBOX_START_TIMEOUT, _whole_json))
            fd, ready_read = ready_read, None
            ready = await asyncio.to_thread(forkserver.read_pipe, fd, SANDBOX_START_TIMEOUT,
                                          lambda text: text == b"ready")
            if ready != b"ready":
                return f"the sandbox's placeholder did not start: {ready[:200]!r}"
        finally:
            for fd in (info_read, ready_read):
                if fd is not None:
                    os.close(fd)
        request = {"ns_pid": int(info["child-pid"]), "uid": self.account, "gid": self.account,
                   "ns_inodes": {ns: info[f"{ns}-namespace"] for ns in forkserver.NAMESPACES if f"{ns}-namespace" in info},
                   "groups": kernel_groups(self.gpu), "cwd": self.scratch, "env": env, "argv": argv,
                   "cgroups": [str(c) for c in self.cgroups], "oom_score_adj": KERNEL_OOM_SCORE,
                   "seccomp": seccomp_program()}
        return await asyncio.to_thread(server.start, request)

    async def _async_pre_start_kernel(self, **kw):
        kw["cwd"] = self.scratch
        # the gradebook's URL and password stay with the grader: nbgrader writes grades, never the kernel
        kw["env"] = kernel_env(kw.get("env"))
        # not the grader's stdout and stderr (a worker's log file, read and written by every kernel
        # it starts: a channel from one student's notebook to the next, red team 2026-12-02); what
        # the kernel prints reaches the grader as messages
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        return cmd, kw

    async def _async_interrupt_kernel(self) -> None:
        if self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        await super()._async_interrupt_kernel()

    interrupt_kernel = _async_interrupt_kernel

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            self.remove_folders()

    cleanup_resources = _async_cleanup_resources

    def remove_folders(self) -> None:
        """Remove the kernel's cgroups (killing what is left in them) and folder (scratch, sockets)."""
        for cgroup in self.cgroups:
            if not _tasks.remove(cgroup):
                self.log.warning("attnlab: could not remove the kernel's cgroup %s (the next run's sweep will)", cgroup)
        if not remove_tree(self.folder):
            self.log.warning("attnlab: could not remove the kernel's folder %s", self.folder)
