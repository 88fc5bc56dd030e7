"""A throwaway PostgreSQL server for the tests: a new cluster in a temporary folder, reached through a
Unix socket in that folder only (no TCP), with a password login, stopped and removed afterwards.

Uses Debian's postgresql package (``.ci/install-postgres``; ``initdb`` on PATH or under
/usr/lib/postgresql/*/bin). PostgreSQL refuses to run as root: as root the cluster belongs to, and
the server runs as, the ``postgres`` account (else ``nobody``), through ``runuser``.
"""

from __future__ import annotations

import glob
import os
import pwd
import random
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path


def find_bindir() -> str | None:
    """The folder holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(os.path.realpath(initdb))
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


class PostgresServer:
    """One cluster: :meth:`start`, :meth:`create_database`, :meth:`url`, :meth:`stop`."""

    def __init__(self, bindir: str):
        self.bindir = bindir
        self.folder = Path(tempfile.mkdtemp(prefix="attnlab-pg-"))
        self.data = self.folder / "data"
        self.port = random.randint(20000, 60000)  # names the socket file; the folder is private anyway
        self.user, self.password = "grader", secrets.token_urlsafe(12)
        self._as = []
        if os.geteuid() == 0:
            account = "postgres" if _exists("postgres") else "nobody"
            self._as = ["runuser", "-u", account, "--"]
            info = pwd.getpwnam(account)
            os.chown(self.folder, info.pw_uid, info.pw_gid)
        self.folder.chmod(0o700)

    def _run(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
        p = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=timeout, cwd=self.folder)
        if p.returncode != 0:
            log = self.folder / "server.log"
            raise RuntimeError(f"{' '.join(cmd[:2])} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}\n"
                               + (log.read_text()[-2000:] if log.exists() else ""))
        return p

    def start(self) -> "PostgresServer":
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            shutil.chown(pwfile, user=self._as[2])
        self._run(f"{self.bindir}/initdb", "-D", str(self.data), "-U", self.user, f"--pwfile={pwfile}",
                  "--auth=scram-sha-256", "-E", "UTF8", "--no-sync")
        pwfile.unlink()
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server on the cluster (again, after :meth:`halt`)."""
        opts = f"-c listen_addresses='' -k {self.folder} -p {self.port} -c fsync=off -c max_connections=100"
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w",
                  "-t", "60", "-o", opts, "start")

    def halt(self) -> None:
        """Stop the server and keep its data, as an outage would (open connections are ended)."""
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=60)

    @property
    def socket(self) -> Path:
        """The server's Unix socket (absent while it is halted)."""
        return self.folder / f".s.PGSQL.{self.port}"

    def stop(self) -> None:
        try:
            self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL (psycopg 3 driver) with the password, through the socket folder."""
        return (f"postgresql+psycopg://{self.user}:{self.password}@/{database}"
                f"?host={self.folder}&port={self.port}")

    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its URL."""
        import psycopg

        with psycopg.connect(host=str(self.folder), port=self.port, user=self.user, password=self.password,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _exists(account: str) -> bool:
    try:
        pwd.getpwnam(account)
        return True
    except KeyError:
        return False
