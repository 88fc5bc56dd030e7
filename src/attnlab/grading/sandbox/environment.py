"""A kernel's environment: the grader's secrets left out (:func:`kernel_env`), every home, cache and
config folder in its scratch folder (:func:`scratch_env`), and what bwrap's ``--setenv`` gives it
(:func:`kernel_environment`, for the fork server's kernels).
"""

from __future__ import annotations

import os
import re

from .accounts import KERNEL_ACCOUNT_NAME

#: What a database client may read (the gradebook's ``ATTNLAB_DB_URL``, libpq's PG*, the common
#: DATABASE_URL) and the course secret (leaderboard ids, the tests' seed keys): the grader's secrets,
#: never given to a kernel.
_SECRET = re.compile(r"^(ATTNLAB_DB_URL|DATABASE_URL|PG[A-Z_]*|ATTNLAB_COURSE_SECRET)$")


def kernel_env(env: dict | None = None) -> dict:
    """A copy of ``env`` (default: this process's) without the gradebook's URL or libpq's settings
    (``ATTNLAB_DB_URL``, ``DATABASE_URL``, ``PGPASSWORD``, ``PGPASSFILE``, every ``PG*``) or the course
    secret (``ATTNLAB_COURSE_SECRET``): grades are written by nbgrader outside the sandbox, never by
    the kernel."""
    return {k: v for k, v in (os.environ if env is None else env).items() if not _SECRET.match(k)}


def scratch_env(scratch: str) -> dict[str, str]:
    """Environment of sandboxed code: every home, cache and config folder inside the scratch folder."""
    tmp = os.path.join(scratch, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    return {
        "HOME": scratch, "TMPDIR": tmp, "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUSERBASE": os.path.join(scratch, ".local"),
        "XDG_CACHE_HOME": os.path.join(scratch, ".cache"), "XDG_CONFIG_HOME": os.path.join(scratch, ".config"),
        "XDG_DATA_HOME": os.path.join(scratch, ".local", "share"),
        "TRITON_CACHE_DIR": os.path.join(scratch, ".triton"), "MPLCONFIGDIR": os.path.join(scratch, ".matplotlib"),
        "IPYTHONDIR": os.path.join(scratch, ".ipython"), "JUPYTER_CONFIG_DIR": os.path.join(scratch, ".jupyter"),
        "JUPYTER_DATA_DIR": os.path.join(scratch, ".local", "share", "jupyter"),
        "JUPYTER_RUNTIME_DIR": os.path.join(scratch, ".local", "share", "jupyter", "runtime"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, ".cache", "torchinductor"),
        "CUDA_CACHE_PATH": os.path.join(scratch, ".cache", "nv"),
    }


def kernel_environment(env: dict, scratch: str, account: int | None) -> dict[str, str]:
    """The environment a kernel started by :func:`wrap` with the environment ``env`` has (its
    ``--setenv`` and ``--unsetenv``), for the fork server's kernels."""
    env = {**env, **scratch_env(scratch), "PWD": scratch}  # where it runs (bwrap's kernels say "/")
    # ipykernel would take PID 1 (bwrap's reaper) for a dead parent and quit; --die-with-parent
    # already ties the kernel's life to the grader's
    env.pop("JPY_PARENT_PID", None)
    if account is not None:
        env.update(USER=KERNEL_ACCOUNT_NAME, LOGNAME=KERNEL_ACCOUNT_NAME)
    return env
