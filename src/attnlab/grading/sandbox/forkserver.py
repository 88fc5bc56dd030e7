"""Start sandboxed kernels from a process that imported torch once: a fork server per grading process.

Starting a kernel costs about 2 CPU-s, most of it ``import torch``, and a submission of six notebooks
pays it six times: 12 of its 26 CPU-s on the 2-core VM (notes/grading/2026-12-02). A fork server
imports torch, the course's package and ipykernel once (:data:`PRELOAD`), never runs learner code,
and for each kernel of a root grader (kernels run as accounts of their own,
:func:`attnlab.grading.sandbox.kernel_account`):

1. bwrap builds the kernel's sandbox exactly as for a kernel it starts itself (:func:`attnlab.grading.sandbox.wrap`),
   but runs :data:`HOLD` in it, as the kernel's account: a placeholder that waits for the kernel;
2. the server forks; the child joins the sandbox's cgroups (pids, memory), takes the kernels' high
   oom_score_adj, and joins its namespaces (``setns``, each checked
   against the inode number bwrap reported on ``--info-fd``); its children are inside the sandbox's
   PID namespace, and the kernel is the child of one that exits at once, so that the kernel's parent
   is bwrap's reaper, PID 1 (:func:`_fork_kernel`);
3. the kernel does what bwrap and :data:`attnlab.grading.sandbox.drop.DROP_COMMAND` do for a kernel bwrap starts: a session
   of its own, no file descriptor of the server's, ``no_new_privs``, the account's uid, gid and groups,
   an empty bounding set, a session keyring of its own, no capability left (checked); then it takes
   the kernel's environment and working folder and runs ipykernel in this process;
4. :data:`HOLD` exits when the kernel does, so bwrap does: jupyter_client watches and kills bwrap as
   before, and the PID namespace's end kills whatever the kernel left.

The kernel sees what a kernel started by bwrap sees (same mounts, namespaces, account, environment);
what differs is only where its memory came from: a copy of a process that imported libraries and read
no grading data (the server's environment is a kernel's, with its own empty scratch folder as home).
A server is used only when it is single-threaded and has not touched CUDA (a fork would copy a
broken thread pool or CUDA context); otherwise, or when anything here fails, the kernel manager
starts the kernel the usual way (:class:`attnlab.grading.sandbox.SandboxedKernelManager`).

Protocol between the grading process and its server: JSON lines on the server's stdin and stdout;
the server first says ``{"ready": true}`` (or ``false`` and why), then answers each request
(:meth:`Server.start`) with ``{"ok": true}`` or ``{"error": ...}``.
"""
# Length: One job: the fork server, its protocol and the kernel side it runs; they change
# together.

from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

#: What the server imports once, for every kernel it starts (the list of attnlab.grading.worker.kernels._PRELOAD, and ipykernel).
PRELOAD = ("torch", "attnlab.verify", "attnlab.nbload", "attnlab.grading.kernel.guard", "attnlab.grading.sandbox",
           "ipykernel.kernelapp")
#: "0" turns the fork server off (every kernel is started by bwrap, as before).
ENV = "ATTNLAB_FORK_SERVER"
#: Namespaces a kernel joins, in the order joined: the mount namespace last (its /proc is the sandbox's).
NAMESPACES = ("cgroup", "ipc", "uts", "net", "pid", "mnt")
#: Seconds a start may take (the grandchild's set-up; the server's own imports take longer, once).
START_TIMEOUT = 30.0
READY_TIMEOUT = 180.0
#: Environment variables that differ from kernel to kernel and are read after start-up, not while the
#: server imports: they do not decide which server may start a kernel (:func:`server_key`).
_PER_KERNEL = frozenset({"HOME", "TMPDIR", "PYTHONUSERBASE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                         "TRITON_CACHE_DIR", "MPLCONFIGDIR", "IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR",
                         "JUPYTER_RUNTIME_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "USER", "LOGNAME",
                         "CUDA_VISIBLE_DEVICES", "ATTNLAB_DEVICE", "JPY_PARENT_PID", "JPY_SESSION_NAME", "PWD",
                         "OLDPWD"})
#: Namespaces whose inode bwrap must report before a kernel joins them (cgroup: only where it could
#: make one, ``--unshare-cgroup-try``).
_MUST_MATCH = frozenset(NAMESPACES) - {"cgroup"}

#: The placeholder bwrap runs (``python -I -S -c HOLD FD``, as the kernel's account). Once it runs,
#: the sandbox is complete (bwrap execs its command last): it says so on the pipe FD and closes it,
#: then waits for the kernel, the one process besides itself whose parent is the sandbox's PID 1
#: (nothing else can join: it starts none), and exits when the kernel does, or after START_TIMEOUT
#: if none comes.
HOLD = f"""import os, select, sys, time
os.write(int(sys.argv[1]), b"ready")
os.close(int(sys.argv[1]))
me, deadline = os.getpid(), time.monotonic() + {START_TIMEOUT}
def parent(pid):
    try:
        return [ln.split()[1] for ln in open(f"/proc/{{pid}}/status") if ln.startswith("PPid:")][0]
    except (OSError, IndexError):
        return None
while True:
    kernel = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me and parent(p) == "1"]
    if kernel:
        break
    if time.monotonic() > deadline:
        raise SystemExit("attnlab sandbox: no kernel joined")
    time.sleep(0.005)
try:
    select.select([os.pidfd_open(kernel[0])], [], [])
except (AttributeError, OSError):  # no pidfd (Linux < 5.3)
    while parent(kernel[0]) == "1":
        time.sleep(0.1)
"""

_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 4, 38


# ---------------------------------------------------------------------------------- the server
def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _unfit(allowed_fds: tuple[int, ...] = ()) -> str:
    """Why this process may not fork kernels ("" when it may): another thread (a fork copies one), CUDA
    initialised (a child could not use it), or a file open besides stdin/out/err and ``allowed_fds``: a
    module that holds one would find it closed in the kernel, or another file under its number, and
    the CUDA driver holds ``/dev/nvidiactl`` open once initialised, even where torch's CUDA is not
    (``torch.cuda.is_available()``). Loading the driver's library is no initialisation: a CUDA build
    of torch does it on import."""
    if _threads() != 1:
        return (f"{_threads()} threads after the imports (a fork copies one; set OMP_NUM_THREADS and "
                f"OPENBLAS_NUM_THREADS, as kernel_threads does)")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised while importing"
    open_fds = {fd for fd in map(int, os.listdir("/proc/self/fd")) if _is_open(fd)} - {0, 1, 2, *allowed_fds}
    return f"files open after the imports: {sorted(open_fds)}" if open_fds else ""


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)  # the listing's own descriptor is closed by now
        return True
    except OSError:
        return False


def _join(request: dict) -> None:
    """In the server's child: enter the sandbox's cgroup and namespaces (raises OSError on a mismatch)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid, inodes = int(request["ns_pid"]), request["ns_inodes"]
    if os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
        raise OSError("the sandbox has a user namespace of its own")
    missing = sorted(_MUST_MATCH - set(inodes))
    if missing:
        raise OSError(f"bwrap did not report the sandbox's {', '.join(missing)} namespaces (bwrap >= 0.4 does)")
    fds = []
    for ns in NAMESPACES:
        fd = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
        fds.append(fd)
        if ns in inodes and os.fstat(fd).st_ino != int(inodes[ns]):
            raise OSError(f"process {pid} is not the sandbox's any more ({ns} namespace)")
        if ns in _MUST_MATCH and os.fstat(fd).st_ino == os.stat(f"/proc/self/ns/{ns}").st_ino:
            raise OSError(f"the sandbox shares this process's {ns} namespace")
    for cgroup in request.get("cgroups") or []:  # its pids and memory cgroups (one folder on cgroup v2)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write("0")
    if request.get("oom_score_adj") is not None:  # the server's is the grader's (low): a kernel's is high
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(int(request["oom_score_adj"])))
    for ns, fd in zip(NAMESPACES, fds):
        if libc.setns(fd, 0) != 0:
            raise OSError(ctypes.get_errno(), f"setns({ns}): {os.strerror(ctypes.get_errno())}")
        os.close(fd)


def _become_kernel(request: dict, status: int) -> None:
    """In the grandchild, inside the sandbox: drop to the kernel's account, then run ipykernel."""
    from .drop import DROP_FUNCTION

    os.setsid()
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, status)
    os.closerange(status + 1, os.sysconf("SC_OPEN_MAX"))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    scope: dict = {}
    exec(DROP_FUNCTION, scope)  # the very code bwrap's kernels run (drop.DROP_COMMAND)
    scope["drop"](int(request["uid"]), int(request["gid"]), [int(g) for g in request["groups"]], request["cwd"])
    scope["seccomp"](request.get("seccomp", ""))  # the filter bwrap's kernels get (drop.DROP_COMMAND), before any learner code
    # a uid change makes a process undumpable (its /proc files root's), an exec would undo it: do so here
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    os.environ.clear()
    os.environ.update(request["env"])
    # what the interpreter computed from the server's environment at its start, computed again from the kernel's
    sys.dont_write_bytecode = bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
    import importlib
    import site
    import tempfile

    tempfile.tempdir = None
    site.USER_BASE = site.USER_SITE = None
    importlib.invalidate_caches()
    # every kernel would otherwise draw the server's numbers (Python's random reseeds itself after a fork)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "multiprocessing.process" in sys.modules:  # the key of its connections, and where it started
        process = sys.modules["multiprocessing.process"]
        process.current_process().authkey = os.urandom(32)
        process.ORIGINAL_DIR = request["cwd"]
    if "logging" in sys.modules:  # relativeCreated counts from the kernel's start
        sys.modules["logging"]._startTime = time.time()
    sys.argv = ["ipykernel_launcher", *request["argv"]]
    os.write(status, b"ok")
    os.close(status)  # from here on a failure is the kernel's own (a dead kernel), never reported as the server's
    try:
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
    finally:  # as an interpreter ends: the exit handlers run (learner code's and IPython's), then the process
        import atexit

        atexit._run_exitfuncs()
        os._exit(0)


def _fork_kernel(request: dict) -> dict:
    """Fork a child that joins the sandbox; its own child is PID 3 there and forks the kernel, then
    exits, so that the kernel's parent is the sandbox's PID 1 (bwrap's reaper), as for a kernel bwrap
    starts: ``os.getppid()`` says 1, and the kernel is in bwrap's process tree (:mod:`.proctree`)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # every path of the forks below ends in os._exit: nothing returns into the server
        code = 1
        try:
            os.close(read)
            _join(request)
            inside = os.fork()
            if inside == 0:
                if os.fork() == 0:
                    try:
                        _become_kernel(request, write)  # returns never once it said "ok"
                    except BaseException as exc:  # noqa: BLE001
                        _report(write, exc)
                    finally:
                        os._exit(code)
                os._exit(0)
            os.waitpid(inside, 0)
            code = 0
        except BaseException as exc:  # noqa: BLE001
            _report(write, exc)
        finally:
            os._exit(code)
    os.close(write)
    os.waitpid(child, 0)
    try:
        said = read_pipe(read, START_TIMEOUT)
    except OSError as exc:
        said = str(exc).encode()
    if said == b"ok":
        return {"ok": True}
    return {"error": said.decode(errors="replace").strip() or "the kernel process gave no sign"}


def read_pipe(fd: int, timeout: float, done=None) -> bytes:
    """What comes on the pipe ``fd`` (closed here) until its writers close it, or until ``done(text)``
    says it is complete.

    Raises:
        OSError: ``timeout`` seconds passed first.
    """
    text, deadline = b"", time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            if not ready:
                raise OSError(f"nothing complete within {timeout:g} s: {text[:200]!r}")
            chunk = os.read(fd, 4096)
            text += chunk
            if not chunk or (done is not None and done(text)):
                return text
    finally:
        os.close(fd)


def _report(fd: int, exc: BaseException) -> None:
    try:
        os.write(fd, f"{type(exc).__name__}: {exc}".encode()[:2000])
    except OSError:
        pass


def serve() -> int:
    """The server's main loop (``python -m attnlab.grading.sandbox.forkserver``): import, then start kernels."""
    out = os.fdopen(os.dup(1), "w")
    inp = os.fdopen(os.dup(0), "r")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    why, name = "", ""
    try:
        for name in PRELOAD:
            __import__(name)
        why = _unfit((inp.fileno(), out.fileno()))
    except Exception as exc:  # noqa: BLE001
        why = f"{f'importing {name}' if name else 'starting'} failed: {exc}"

    def say(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    say({"ready": not why, "why": why})
    if why:
        return 1
    for line in inp:
        try:
            request = json.loads(line)
            why = _unfit((inp.fileno(), out.fileno()))
            say({"error": why} if why else _fork_kernel(request))
        except Exception as exc:  # noqa: BLE001
            say({"error": f"{type(exc).__name__}: {exc}"})
    return 0


# ---------------------------------------------------------------------------------- the client
def server_key(env: dict) -> tuple:
    """Which server may start a kernel with the environment ``env``: all of it but :data:`_PER_KERNEL`."""
    return tuple(sorted((k, v) for k, v in env.items() if k not in _PER_KERNEL))


class Server:
    """A running fork server (one per grading process and kernel environment, :func:`server_for`).

    Raises:
        OSError: its process or folder could not be made.
    """

    def __init__(self, env: dict):
        import tempfile

        from .environment import scratch_env

        self.folder = tempfile.mkdtemp(prefix="attnlab-forkserver-")  # its home: empty, never a kernel's
        self.owner = os.getpid()  # a forked copy of the grading process must not share the pipes
        self.lock = threading.Lock()
        env = {**{k: v for k, v in env.items() if k not in _PER_KERNEL}, **scratch_env(self.folder)}
        # a session of its own: a grading parent that finds its worker dead kills its process group
        self.proc = subprocess.Popen([sys.executable, "-m", "attnlab.grading.sandbox.forkserver"], cwd=self.folder, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1, start_new_session=True)
        _record(self.proc.pid, self.folder)
        hello = self._reply(READY_TIMEOUT)
        self.why = "" if hello.get("ready") else hello.get("why") or hello.get("error") or "no answer"
        if self.why:
            self.close()

    def _reply(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        try:
            reply = json.loads(line) if line else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.close()
            return {"error": "the fork server did not answer" if not ready else f"the fork server ended: {line[:200]!r}"}
        return reply

    def start(self, request: dict) -> str:
        """Start a kernel as ``request`` says ("" on success, else why not): ``ns_pid`` (the host's pid of
        the sandbox's PID 1) and ``ns_inodes`` (namespace -> inode, from bwrap's ``--info-fd``); ``uid``,
        ``gid``, ``groups`` (the kernel account); ``cwd`` (its scratch folder); ``env``; ``argv``
        (ipykernel's); ``cgroups`` (the folders of its pids and memory cgroups, maybe none);
        ``oom_score_adj`` (the kernel's)."""
        with self.lock:
            if self.owner != os.getpid() or self.proc.poll() is not None:
                return "the fork server ended"
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:
                self.close()
                return f"the fork server ended: {exc}"
            reply = self._reply(START_TIMEOUT + 10)
        return "" if reply.get("ok") else str(reply.get("error") or "no answer")

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def close(self) -> None:
        """End the server (its kernels live on: each is its sandbox's) and remove its folder."""
        if self.owner == os.getpid() and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        from .scratch import remove_tree

        remove_tree(self.folder)


def _record(pid: int, folder: str) -> None:
    """List the server with the grading process's kernels (``ATTNLAB_KERNEL_PIDFILE``): a grading parent
    that finds its worker dead kills it and removes its folder, as it does for kernels."""
    from .proctree import PIDFILE_ENV, process_start

    path = os.environ.get(PIDFILE_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{pid}:{process_start(pid) or ''} {folder}\n")


#: The running servers of this process, by :func:`server_key`.
SERVERS: dict[tuple, Server] = {}
_SERVERS_LOCK = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() != "0"


def server_for(env: dict) -> Server:
    """The fork server for kernels with environment ``env``: started on first use (a few seconds: it
    imports torch), again if it ended. Check :attr:`Server.why` (why it cannot start kernels, "" when
    it can): a refusal is kept, so that no kernel pays for another import that would be refused too.

    Raises:
        OSError: a new server's process or folder could not be made.
    """
    key = server_key(env)
    with _SERVERS_LOCK:
        server = SERVERS.get(key)
        if server is None or (not server.why and not server.alive()):
            if server is not None:
                server.close()
            server = SERVERS[key] = Server(env)
        return server


def stop_all() -> None:
    """End every fork server of this process (at exit; their kernels live on)."""
    with _SERVERS_LOCK:
        for server in SERVERS.values():
            server.close()
        SERVERS.clear()


atexit.register(stop_all)


if __name__ == "__main__":
    sys.exit(serve())
