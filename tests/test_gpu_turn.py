"""One timing worker on the GPU at a time (attnlab.grading.worker.gpu_turn): the turn is exclusive across
processes, and a holder that dies gives it back."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from attnlab.grading.worker.gpu_turn import gpu_turn, lock_path

_HOLD = """
import sys, time
from attnlab.grading.worker.gpu_turn import gpu_turn
with gpu_turn(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(path: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, path, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_the_turn_is_exclusive_across_processes(tmp_path):
    path = str(tmp_path / "gpu.lock")
    open(path, "w").close()
    holder = _holder(path, 2.0)
    with gpu_turn(path) as waited:
        pass
    assert waited >= 1.5  # the holder's 2 s, less its start
    holder.wait()
    with gpu_turn(None) as waited:  # no lock: one worker alone
        assert waited == 0.0


def test_a_holder_that_is_killed_gives_the_turn_back(tmp_path):
    path = str(tmp_path / "gpu.lock")
    open(path, "w").close()
    holder = _holder(path, 600.0)
    holder.kill()
    holder.wait()
    t0 = time.perf_counter()
    with gpu_turn(path):
        pass
    assert time.perf_counter() - t0 < 5


def test_the_lock_file_is_readable_by_every_account(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    old = os.umask(0o077)
    try:
        path = lock_path()
    finally:
        os.umask(old)
    assert os.path.dirname(path) == str(tmp_path) and path.endswith("attnlab-gpu-1-3.lock")
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert lock_path() == path  # a second call opens the same file
