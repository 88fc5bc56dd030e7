"""One timing worker on the GPU at a time (attnlab.grading.worker.gpu_turn): the grader holds the turn for a
worker, turns on one GPU never overlap, a turn that lasts too long ends its worker and frees the GPU, waiting
for a turn is not charged to a worker's budget, and a wait that never ends is the grader's trouble."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest

from attnlab.grading.worker.gpu_turn import lock_file, serve

#: A worker's end of the channel: N turns of S seconds each on GPU G, the times of each written to a file.
_WORKER = """
import sys, time
from attnlab.grading.worker.gpu_turn import Channel
turns, seconds, log, gpu = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
channel = Channel.open(gpu)
print("this goes to stderr, not into the channel")
for _ in range(turns):
    with channel.turn():
        start = time.time()
        time.sleep(seconds)
        with open(log, "a") as f:
            f.write(f"{start} {time.time()}\\n")
"""


def _start(turns: int, seconds: float, log, gpu: str = "GPU-0000aaaa") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WORKER, str(turns), str(seconds), str(log), gpu], bufsize=0,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def _serve_in_thread(proc, lock_dir, budget_s: float) -> dict:
    out: dict = {}

    def run():
        with proc:
            out["stopped"] = serve(proc, lock_dir, budget_s)

    out["thread"] = threading.Thread(target=run)
    out["thread"].start()
    return out


def holds(path) -> bool:
    """Whether some process holds the flock of ``path`` now (/proc/locks names the file's device and inode)."""
    st = os.stat(path)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "
    with open("/proc/locks") as f:
        return any(key in line and "->" not in line for line in f)


def waited_for(path) -> bool:
    """Whether some process waits for the flock of ``path`` now ("->" lines of /proc/locks)."""
    st = os.stat(path)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "
    with open("/proc/locks") as f:
        return any(key in line and "->" in line for line in f)


def test_turns_on_one_gpu_never_overlap_and_other_gpus_do_not_wait(tmp_path):
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    served = [_serve_in_thread(_start(3, 0.2, log), tmp_path, 60) for log in logs]
    other = _serve_in_thread(_start(1, 0.0, tmp_path / "other.log", gpu="GPU-0000bbbb"), tmp_path, 60)
    for s in (*served, other):
        s["thread"].join(60)
    assert all(s["stopped"] is None for s in (*served, other)), served
    spans = sorted(tuple(map(float, line.split())) for log in logs for line in log.read_text().splitlines())
    assert len(spans) == 9
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    assert {p.name for p in tmp_path.glob("*.lock")} == {"attnlab-gpu-GPU-0000aaaa.lock", "attnlab-gpu-GPU-0000bbbb.lock"}


def test_without_a_lock_folder_a_worker_gets_its_turns_at_once(tmp_path):
    log = tmp_path / "w.log"
    with _start(2, 0.1, log) as proc:
        assert serve(proc, None, 60) is None
    assert proc.returncode == 0 and len(log.read_text().splitlines()) == 2


def test_a_turn_past_its_limit_ends_the_worker_and_frees_the_gpu(tmp_path):
    t0 = time.monotonic()
    with _start(1, 600, tmp_path / "w.log") as proc:
        stopped = serve(proc, tmp_path, 60, turn_limit_s=1.0)
    assert "more than 1 s in one turn" in stopped.reason and not stopped.grader, stopped
    assert proc.returncode != 0 and time.monotonic() - t0 < 30
    with _start(1, 0.0, tmp_path / "other.log") as other:
        assert serve(other, tmp_path, 30) is None  # the GPU is free again


def test_waiting_for_a_turn_is_not_charged_to_a_worker(tmp_path):
    """A worker whose own work takes 1 s, with a budget of 4 s, waits 6 s for a neighbour's turn and still
    ends in time."""
    neighbour = _serve_in_thread(_start(1, 6.0, tmp_path / "n.log"), tmp_path, 60)
    path = tmp_path / "attnlab-gpu-GPU-0000aaaa.lock"
    deadline = time.monotonic() + 30
    while not (path.exists() and holds(path)) and time.monotonic() < deadline:  # the neighbour's turn began
        time.sleep(0.05)
    t0 = time.monotonic()
    with _start(1, 1.0, tmp_path / "w.log") as proc:
        assert serve(proc, tmp_path, 4.0) is None
    assert time.monotonic() - t0 > 4.0  # it did wait longer than its budget
    neighbour["thread"].join(30)
    assert neighbour["stopped"] is None


def test_a_wait_that_never_ends_is_the_graders_trouble_not_the_learners(tmp_path):
    path = lock_file(str(tmp_path), "GPU-0000aaaa")
    with open(path, "rb") as holder:  # a grader stopped (Ctrl-Z) while it held a turn
        fcntl.flock(holder, fcntl.LOCK_EX)
        with _start(1, 0.0, tmp_path / "w.log") as proc:
            stopped = serve(proc, tmp_path, 60, wait_limit_s=1.0)
    assert stopped.grader and "waited over 1 s" in stopped.reason, stopped


def test_a_worker_gone_while_it_waits_is_reported_not_raised(tmp_path):
    path = lock_file(str(tmp_path), "GPU-0000aaaa")
    with open(path, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        proc = _start(1, 0.0, tmp_path / "w.log")
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(stopped=serve(proc, tmp_path, 60)))
        thread.start()
        deadline = time.monotonic() + 30
        while not waited_for(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    thread.join(30)
    with proc:
        pass
    assert result["stopped"].grader and "ended while it waited" in result["stopped"].reason, result


def test_lock_files_are_readable_by_every_account_and_named_only_by_plain_names(tmp_path):
    old = os.umask(0o077)
    try:
        path = lock_file(str(tmp_path), "GPU-1234-abcd")
    finally:
        os.umask(old)
    assert path == str(tmp_path / "attnlab-gpu-GPU-1234-abcd.lock")
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert lock_file(str(tmp_path), "GPU-1234-abcd") == path  # a second call opens the same file
    for bad in ("", "../x", "a b", "a/b"):
        with pytest.raises(ValueError):
            lock_file(str(tmp_path), bad)
    (tmp_path / "attnlab-gpu-link.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        lock_file(str(tmp_path), "link")


_ROGUE = """
import os, sys
what = sys.argv[1]
if what == "asks":  # asks and gives back turns without end, never reading the answers
    os.write(1, b"turn? GPU-0000aaaa\\nturn done\\n" * 40000)
elif what == "no-newline":
    os.write(1, b"x" * 100000)
elif what == "stderr":
    for _ in range(64):
        os.write(2, b"y" * 65536)
import time
time.sleep(60)
"""


@pytest.mark.parametrize("what, reason", [
    ("asks", "more GPU turns than its jobs need"),
    ("no-newline", "a line the grader does not read"),
    ("stderr", "printed over"),
])
def test_a_worker_that_breaks_the_channel_is_stopped_and_never_blocks_the_grader(tmp_path, monkeypatch, what, reason):
    """A worker sending turn requests it never waits for (the pipe of answers fills up), junk without an end
    of line, or a flood on stderr is stopped at once; the grader neither blocks nor keeps what it sent."""
    from attnlab.grading.worker import gpu_turn

    monkeypatch.setattr(gpu_turn, "OUTPUT_LIMIT", 2 ** 20)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", _ROGUE, what], bufsize=0, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with proc:
        stopped = serve(proc, tmp_path, 60, max_turns=2, tail=bytearray())
    assert stopped is not None and reason in stopped.reason and not stopped.grader, stopped
    assert time.monotonic() - t0 < 30
    if what == "asks":
        with _start(1, 0.0, tmp_path / "other.log") as other:
            assert serve(other, tmp_path, 30) is None  # the GPU is free
