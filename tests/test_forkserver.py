"""The fork server (attnlab.grading.sandbox.forkserver): a kernel it starts is confined exactly as one bwrap
starts, it ends with its sandbox, and anything that goes wrong falls back to bwrap's own start."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys

import pytest

from attnlab.grading.sandbox import forkserver, manager
from attnlab.grading import sandbox
from attnlab.grading.host.parallel import THREAD_VARS

from .kernel_runner import in_kernel as _in_kernel
from .kernel_runner import kernel_env as _kernel_env

pytestmark = [
    pytest.mark.skipif(not sandbox.check()[0], reason="bubblewrap cannot start a sandbox here"),
    pytest.mark.skipif(os.geteuid() != 0 or bool(sandbox.kernel_accounts()),
                       reason="the fork server serves root graders whose kernels have accounts of their own"),
]

#: What a kernel can observe about its confinement; the fork server's kernel must see the same.
_PROBE = r"""
import json, os, resource, signal, sys
status = dict(ln.split(":", 1) for ln in open("/proc/self/status").read().splitlines() if ":" in ln)
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({
    "uid_is_account": os.getuid() == os.getgid() != 0 and os.getresuid() == (os.getuid(),) * 3,
    "groups": os.getgroups(),
    "caps": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
    "pids_seen": len([p for p in os.listdir("/proc") if p.isdigit()]), "own_pid_small": os.getpid() <= 4, "parent": os.getppid(),
    "session_in_sandbox": os.getsid(0) != 0,
    "cwd_is_home": os.getcwd() == os.environ["HOME"],
    "hidden": {p: len(listing(p)) for p in ("/tmp", "/root", "/home", "/run")},
    "writable_root": os.access("/", os.W_OK), "own_fds": listing("/proc/self/fd") != "PermissionError",
    "env": sorted((k, v.replace(os.environ["HOME"], "<scratch>")) for k, v in os.environ.items()
                  if k not in ("PWD",)),
    "pwd": os.environ.get("PWD"),
    "initial_environ_secret": b"ATTNLAB_DB_URL" in open("/proc/self/environ", "rb").read(),
    "umask": os.umask(0o022),
    "rlimits": [resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_AS, resource.RLIMIT_CORE)],
    "sigchld": str(signal.getsignal(signal.SIGCHLD)), "sigpipe": str(signal.getsignal(signal.SIGPIPE)),
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "path": sys.path, "flags": [sys.flags.safe_path, sys.flags.no_user_site, sys.flags.isolated],
    "dont_write_bytecode": sys.dont_write_bytecode,
    "computed_at_start": [__import__("tempfile").gettempdir().replace(os.environ["HOME"], "<scratch>"),
                          __import__("site").getuserbase().replace(os.environ["HOME"], "<scratch>")],

    "stdin_is_null": os.path.realpath("/proc/self/fd/0") == "/dev/null",
}))
"""


def test_a_forked_kernel_is_confined_as_one_bwrap_starts():
    """Same account kind, capabilities, namespaces, hidden folders, environment, limits and signals
    as a kernel bwrap starts itself; the gradebook's URL is in neither's environment."""
    forked_out, forked, _ = asyncio.run(_in_kernel(_PROBE, fork_server=True))
    plain_out, plain, _ = asyncio.run(_in_kernel(_PROBE, fork_server=False))
    assert forked and not plain
    got, want = json.loads(forked_out), json.loads(plain_out)
    assert got["uid_is_account"] and got["caps"] == {k: "0000000000000000" for k in got["caps"]}
    assert got["no_new_privs"] == "1" and not got["writable_root"] and not got["initial_environ_secret"]
    assert "ATTNLAB_DB_URL" not in dict(got["env"])
    # where they differ, the forked kernel is right and bwrap's is not: PWD is where it runs (bwrap
    # says "/"), stdin is /dev/null (jupyter_client gives bwrap a pipe)
    assert got["pwd"].endswith("/scratch") and got["stdin_is_null"]
    differ = {k: (got[k], want[k]) for k in want if got[k] != want[k] and k not in ("pwd", "stdin_is_null")}
    # bwrap's PID 1 and the placeholder are there too: the forked kernel is the third process
    assert set(differ) <= {"pids_seen"} and got["pids_seen"] == want["pids_seen"] + 1, differ


def test_a_kernel_that_ends_ends_its_sandbox():
    """The placeholder exits with the kernel, so bwrap does: jupyter_client sees the kernel gone."""
    async def gone(km):
        for _ in range(100):
            if not await km.is_alive():
                return True
            await asyncio.sleep(0.05)
        return False

    _, forked, ended = asyncio.run(_in_kernel("import os\nos._exit(0)", fork_server=True, after=gone, wait=False))
    assert forked and ended


def test_a_failing_fork_server_leaves_the_start_to_bwrap(monkeypatch, caplog):
    manager.FORK_REFUSALS_SAID.clear()
    monkeypatch.setattr(forkserver.Server, "start", lambda self, request: "broken on purpose")
    out, forked, _ = asyncio.run(_in_kernel("print(6 * 7)", fork_server=True))
    assert out.strip() == "42" and not forked
    assert "broken on purpose" in caplog.text


def test_the_server_refuses_to_fork_with_threads_or_cuda():
    """A fork copies one thread: a server whose imports started a thread pool refuses (and the kernel
    manager then lets bwrap start the kernel); so does one where CUDA started."""
    code = ("import threading, time, torch\nfrom attnlab.grading.sandbox import forkserver as f\nprint(repr(f._unfit()))\n"
            "e = threading.Event()\nt = threading.Thread(target=e.wait)\nt.start()\nprint(repr(f._unfit()))\n"
            "e.set()\nt.join()\nwhile f._threads() > 1:\n    time.sleep(0.01)\n"
            "torch.cuda.is_initialized = lambda: True\nprint(repr(f._unfit()))\n"
            "torch.cuda.is_initialized = lambda: False\nkept = open('/dev/null')\nprint(repr(f._unfit()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **{var: "1" for var in THREAD_VARS}})
    alone, threaded, cuda, held = [ast.literal_eval(line) for line in out.stdout.splitlines()]
    assert alone == "" and threaded.startswith("2 threads") and cuda.startswith("CUDA"), out.stderr
    assert held.startswith("files open after the imports")


def test_kernels_that_need_another_environment_get_another_server(monkeypatch):
    env = _kernel_env()
    assert forkserver.server_key(env) == forkserver.server_key({**env, "HOME": "/elsewhere",
                                                                   "CUDA_VISIBLE_DEVICES": ""})
    assert forkserver.server_key(env) != forkserver.server_key({**env, "OMP_NUM_THREADS": "4"})
    monkeypatch.setenv(forkserver.ENV, "0")
    assert not forkserver.enabled()
    _, forked, _ = asyncio.run(_in_kernel("pass", fork_server=True))
    assert not forked


def test_kernels_of_one_grading_process_share_one_server():
    """The second kernel is forked by the server the first one started (each kernel's own folders and
    account do not make it another server's), and the server imported torch once; the two kernels'
    random numbers differ."""
    forkserver.stop_all()
    pids, draws = [], []
    code = ("import os, random, numpy, torch, multiprocessing\nprint(os.getpid(), os.getppid())\n"
            "print(random.random(), numpy.random.random(), torch.rand(1).item(),\n"
            "      multiprocessing.current_process().authkey.hex(), hash('x'))")
    for _ in range(2):
        out, forked, _ = asyncio.run(_in_kernel(code, fork_server=True))
        where, drawn = out.strip().splitlines()
        assert forked and where.split() == ["4", "1"]
        pids.append([s.proc.pid for s in forkserver.SERVERS.values()])
        draws.append(drawn.split())
    assert len(pids[0]) == 1 and pids[0] == pids[1]
    # each kernel draws its own random numbers and multiprocessing key, as kernels bwrap starts do; str
    # hashes are the server's
    # (the order of a set of strings is the same in every kernel of one grading process)
    assert all(a != b for a, b in zip(draws[0][:4], draws[1][:4])) and draws[0][4] == draws[1][4], draws
    folder = next(iter(forkserver.SERVERS.values())).folder
    forkserver.stop_all()
    assert not os.path.exists(folder)


@pytest.mark.parametrize("where", ["server", "placeholder"])
def test_whatever_fails_on_the_way_bwrap_starts_the_kernel(monkeypatch, caplog, where):
    """A server that cannot be started (no space for its folder), a sandbox whose placeholder never
    says it is ready: the kernel still starts (bwrap's own start), and the reason is logged once."""
    forkserver.stop_all()
    manager.FORK_REFUSALS_SAID.clear()
    if where == "server":
        def broken(self, env):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(forkserver.Server, "__init__", broken)
    else:
        monkeypatch.setattr(forkserver, "HOLD", "import time; time.sleep(60)")
        monkeypatch.setattr(manager, "SANDBOX_START_TIMEOUT", 1.0)
    for _ in range(2):
        out, forked, _ = asyncio.run(_in_kernel("print(6 * 7)", fork_server=True))
        assert out.strip() == "42" and not forked
    assert caplog.text.count("the fork server could not start the kernel") == 1, caplog.text
    forkserver.stop_all()


def test_a_server_that_died_is_replaced():
    forkserver.stop_all()
    asyncio.run(_in_kernel("pass", fork_server=True))
    (first,) = forkserver.SERVERS.values()
    first.proc.kill()
    first.proc.wait()
    _, forked, _ = asyncio.run(_in_kernel("pass", fork_server=True))
    (second,) = forkserver.SERVERS.values()
    assert forked and second is not first and not os.path.exists(first.folder)
    forkserver.stop_all()
