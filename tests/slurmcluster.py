"""A throwaway one-node Slurm cluster for the tests: MUNGE with a generated key, slurmctld and slurmd
with a generated slurm.conf, all in a temporary folder (key, sockets, state, spool, logs), on free
loopback ports; no accounting database. Stopped and removed afterwards.

Uses Debian's ``slurm-wlm`` and ``munge`` packages (``.ci/install-slurm``). The daemons run as the
current user (root in CI; Slurm then runs jobs as root too). The node is ``localhost`` with the CPUs
and memory ``slurmd -C`` finds on this machine. Client commands find the cluster through
``SLURM_CONF`` (:meth:`SlurmCluster.env`); nothing outside the folder is written.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

#: Where Debian puts the daemons (not on a non-root user's PATH).
SBIN = ("/usr/sbin", "/sbin")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "scontrol", "sinfo")


def find(program: str) -> str | None:
    return shutil.which(program) or next((f"{d}/{program}" for d in SBIN if os.access(f"{d}/{program}", os.X_OK)),
                                         None)


def missing() -> list[str]:
    """The programs this cluster needs that are not installed."""
    return [p for p in PROGRAMS if find(p) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """One node: :meth:`start`, :meth:`run` (client commands), :meth:`wait_job`, :meth:`stop`."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="attnlab-slurm-"))
        self.folder.chmod(0o700)  # munged refuses a key or socket in a folder others may write
        self.conf = self.folder / "slurm.conf"
        self.munge_socket = self.folder / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}

    # ------------------------------------------------------------------ set-up
    def _node(self) -> tuple[int, int]:
        """(CPUs, RealMemory in MB) of this machine, as slurmd itself reports them."""
        out = subprocess.run([find("slurmd"), "-C"], capture_output=True, text=True, timeout=60).stdout
        cpus, mem = re.search(r"CPUs=(\d+)", out), re.search(r"RealMemory=(\d+)", out)
        return (int(cpus.group(1)) if cpus else os.cpu_count() or 1), (int(mem.group(1)) if mem else 1024)

    def _write_conf(self) -> None:
        cpus, mem = self._node()
        user = getpass.getuser()
        f = self.folder
        for sub in ("state", "spool"):
            (f / sub).mkdir()
        self.conf.write_text("\n".join([
            "ClusterName=attnlab-test",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            f"SlurmUser={user}", f"SlurmdUser={user}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}", f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}", f"SlurmdLogFile={f / 'slurmd.log'}",
            # no cgroups (a container's are read-only): processes tracked by their parent links
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "MpiDefault=none", "ReturnToService=2",
            # schedule within a second or two of a submission or a job's end (the default waits up to 60 s)
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1,bf_interval=1",
            "KillWait=5",  # SIGTERM, then SIGKILL 5 s later (30 s by default)
            "MinJobAge=600",  # finished jobs stay visible to scontrol for the test
            f"NodeName=localhost CPUs={cpus} RealMemory={mem} State=UNKNOWN",
            "PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n")

    def _daemon(self, name: str, *cmd: str) -> None:
        log = open(self.folder / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            cwd=self.folder, env=self.env(), start_new_session=True)
        log.close()

    def _wait(self, what: str, ready, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}) while waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"no {what} after {timeout:.0f} s:\n{self.logs()}")

    def start(self) -> "SlurmCluster":
        key = self.folder / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._daemon("munged", find("munged"), "-F", "--force", f"--socket={self.munge_socket}",
                     f"--key-file={key}", f"--pid-file={self.folder / 'munged.pid'}",
                     f"--seed-file={self.folder / 'munged.seed'}", f"--log-file={self.folder / 'munged.log'}")
        self._wait("MUNGE socket", self.munge_socket.exists)
        self._write_conf()
        self._daemon("slurmctld", find("slurmctld"), "-D", "-i", "-f", str(self.conf))
        self._wait("slurmctld", lambda: self.run("scontrol", "ping", check=False).stdout.count("UP") > 0)
        self._daemon("slurmd", find("slurmd"), "-D", "-N", "localhost", "-f", str(self.conf))
        self._wait("an idle node", lambda: self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle")
        return self

    # ------------------------------------------------------------------ use
    def env(self, extra: dict | None = None) -> dict:
        """The environment for client commands (and so for the jobs they submit with --export=ALL)."""
        path = os.environ.get("PATH", "")
        path += "".join(f":{d}" for d in SBIN if d not in path.split(":"))
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": path, **(extra or {})}

    def run(self, *cmd: str, env: dict | None = None, check: bool = True, cwd=None) -> subprocess.CompletedProcess:
        p = subprocess.run([find(cmd[0]) or cmd[0], *cmd[1:]], capture_output=True, text=True, timeout=60,
                           env=self.env(env), cwd=cwd)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def job_states(self, job: str) -> dict[str, str]:
        """{job or array task id: state} for a job id (an array's tasks as ``<id>_<i>``)."""
        out = self.run("scontrol", "-o", "show", "job", job).stdout
        states = {}
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            task = fields.get("ArrayTaskId")
            key = f"{fields['ArrayJobId']}_{task}" if task and "ArrayJobId" in fields else fields["JobId"]
            states[key] = fields["JobState"]
        return states

    def wait_job(self, job: str, timeout: float = 600) -> dict[str, str]:
        """Wait until every task of ``job`` has finished; their final states."""
        done = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                "PREEMPTED")
        self._wait(f"the end of job {job}", lambda: all(s in done for s in self.job_states(job).values()), timeout)
        return self.job_states(job)

    def logs(self) -> str:
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log", "munged.out", "slurmctld.out", "slurmd.out"):
            path = self.folder / name
            if path.exists():
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel the jobs still running (a test that failed half-way), stop the daemons and remove the
        folder. slurmstepd, which runs a job, outlives slurmd: jobs are cancelled first."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                self.run("scancel", f"--user={getpass.getuser()}", check=False)
                deadline = time.monotonic() + 20  # KillWait (5 s) and the job's end
                while self.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
                    time.sleep(0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
