"""One timing worker on the GPU at a time (attnlab.grading.worker.gpu_turn): the grader holds the turn for a
worker, turns never overlap, a turn that lasts too long ends its worker and frees the GPU, and waiting for
a turn is not charged to a worker's budget."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from attnlab.grading.worker.gpu_turn import lock_path, serve

#: A worker's end of the channel: N turns of S seconds each, the times of each written to a file.
_WORKER = """
import sys, time
from attnlab.grading.worker.gpu_turn import Channel
channel = Channel.open()
print("this goes to stderr, not into the channel")
turns, seconds, log = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
for _ in range(turns):
    with channel.turn():
        start = time.time()
        time.sleep(seconds)
        with open(log, "a") as f:
            f.write(f"{start} {time.time()}\\n")
"""


def _start(turns: int, seconds: float, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WORKER, str(turns), str(seconds), str(log)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def _served(proc, lock, budget_s: float, turn_limit_s: float = 60.0) -> dict:
    out = {}

    def run():
        out["error"] = serve(proc, lock, budget_s, turn_limit_s)
        proc.wait()

    thread = threading.Thread(target=run)
    thread.start()
    out["thread"] = thread
    return out


def test_turns_of_workers_sharing_the_gpu_never_overlap(tmp_path):
    lock = lock_path_in(tmp_path)
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    served = [_served(_start(3, 0.2, log), lock, 60) for log in logs]
    for s in served:
        s["thread"].join(60)
    assert all(s["error"] is None for s in served), served
    spans = sorted(tuple(map(float, line.split())) for log in logs for line in log.read_text().splitlines())
    assert len(spans) == 9
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def test_without_a_lock_a_worker_gets_its_turns_at_once(tmp_path):
    log = tmp_path / "w.log"
    proc = _start(2, 0.1, log)
    assert serve(proc, None, 60) is None
    assert proc.wait() == 0 and len(log.read_text().splitlines()) == 2


def test_a_turn_past_its_limit_ends_the_worker_and_frees_the_gpu(tmp_path):
    lock = lock_path_in(tmp_path)
    proc = _start(1, 600, tmp_path / "w.log")
    t0 = time.monotonic()
    error = serve(proc, lock, 60, turn_limit_s=1.0)
    assert "more than 1 s in one turn" in error, error
    assert proc.wait(10) != 0 and time.monotonic() - t0 < 30
    other = _start(1, 0.0, tmp_path / "other.log")
    assert serve(other, lock, 30) is None  # the GPU is free again


def test_waiting_for_a_turn_is_not_charged_to_a_worker(tmp_path):
    """A worker whose own work takes 1 s, with a budget of 4 s, waits 6 s for a neighbour's turn and still
    ends in time."""
    lock = lock_path_in(tmp_path)
    neighbour = _served(_start(1, 6.0, tmp_path / "n.log"), lock, 60)
    deadline = time.monotonic() + 30
    while not _holds(lock) and time.monotonic() < deadline:  # until the neighbour's turn has begun
        time.sleep(0.05)
    proc = _start(1, 1.0, tmp_path / "w.log")
    t0 = time.monotonic()
    assert serve(proc, lock, 4.0) is None
    assert time.monotonic() - t0 > 4.0  # it did wait longer than its budget
    neighbour["thread"].join(30)
    assert neighbour["error"] is None


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


def lock_path_in(folder) -> str:
    path = str(folder / "gpu.lock")
    open(path, "w").close()
    return path


def _holds(lock: str) -> bool:
    """Whether some process holds ``lock`` now (/proc/locks names the file's inode)."""
    ino = os.stat(lock).st_ino
    with open("/proc/locks") as f:
        return any(f":{ino} " in line and "->" not in line for line in f)
