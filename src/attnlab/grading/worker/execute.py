"""nbgrader's Execute step, hardened: a notebook keeps the points its tests earned whatever one cell does.

:class:`GradingExecute` replaces ``nbgrader.preprocessors.Execute`` in ``Autograde.autograde_preprocessors``
(see nbgrader_config.py), so ``nbgrader autograde`` and ``attnlab autograde`` both use it. On top of
nbgrader's execution (per-cell timeout with an interrupt, errors allowed) it

- **survives a dead kernel** (``os._exit``, a segfault, the out-of-memory killer) and a cell that
  ignores the interrupt: the cell gets an error output saying what happened, the kernel is
  restarted and the notebook is run again from the top without that cell (at most
  ``max_restarts`` times). Every point is still earned by a test cell that ran to the end without
  an error in a kernel that ran the notebook's cells in order; a test cell that did not run gets
  an error output, so it scores 0 (nbgrader gives full points to a test cell without an error);
- bounds the whole notebook by ``notebook_budget`` seconds: cells past it are marked not run;
- runs the kernel in a bubblewrap sandbox (:mod:`attnlab.grading.sandbox`, ``sandbox``): its only
  writable place is a scratch copy of the submission folder; the course folder, the gradebook,
  other students and the grader's processes are out of its sight, and every process it starts
  dies with it. Without the sandbox (``sandbox = False``, the instructor's explicit choice) it
  still runs in a scratch copy, so files a learner's code writes (or a ``chdir``) cannot touch the
  autograded folder;
- caps the kernel's memory on the CPU (``memory_limit_gb``), so a runaway allocation raises
  ``MemoryError`` in its cell instead of starving the machine;
- gives the kernel one CPU thread per pool (``kernel_threads``): the tests' tensors are tiny, and a
  second intra-op thread only spin-waits (it cost a third of the CPU of grading a submission);
- truncates output past ``max_output_chars`` of text (metadata and non-figure data included) and
  ``max_figure_chars`` of figures per cell, and ``max_notebook_output_chars`` in all; error outputs are
  always kept, with their tracebacks shortened;
- hides the GPU from notebooks with no GPU case (:func:`attnlab.grading.course.uses_gpu`: no device
  node in the sandbox, ``CUDA_VISIBLE_DEVICES`` empty), so they grade as on a CPU host and skip
  CUDA's start-up;
- starts the kernels of a root grader from a fork server (:mod:`attnlab.grading.sandbox.forkserver`,
  ``fork_server``): a process of the grader's that imported torch, the course's package and
  ipykernel once forks each kernel into the sandbox bwrap built for it, which saves the ~2 CPU-s of
  those imports per notebook; the kernel is confined as one bwrap starts;
- keeps one spare kernel warm (started, with torch and the course's package imported, in a
  sandbox and scratch folder of its own that no learner code has seen) while a notebook runs, so
  the next notebook graded by the same process starts at once (``prewarm``); it is started with or
  without the GPU as the submission's next notebook (in nbgrader's sorted order) needs;
- installs the integrity guard (:mod:`attnlab.grading.kernel.guard`) in the kernel and runs it around
  every read-only cell, so tests compare against the course's references even if learner code
  replaced them; what it restores is reported in the cell's output and in the grader's notes.

Notes from the checks that start with "needs review: " (:func:`attnlab.core.review.flag`) are kept as
they are, so the report can list them apart. Everything it noticed is appended to ``notebook.metadata.attnlab.notes`` and shown to the learner in a
"Grader's notes" cell at the top of the autograded notebook (and so in the feedback).
"""
# Length: To split (issue 32): its steps (guard calls, output limits, kernel restarts, timing of
# cells) are to become one nbgrader preprocessor each.
# It stays long until then: its steps share one kernel client and one cell loop (nbclient's), so no part
# moves out cheaply; its review notes are told apart by attnlab.core.outcome (kinds), not by their words.

from __future__ import annotations

import ast
import atexit
import json
import os
import secrets
import shutil
import signal
import stat
import tempfile
from pathlib import Path
from time import monotonic

from nbclient.client import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_markdown_cell, new_output
from nbclient.util import run_sync
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Float, Integer, Unicode

from ...core.device import FORCE_ENV
from ...core.outcome import RAN_ALL_ALONG, Note, contended, is_review, split_reviews
from ...core.review import PREFIX as REVIEW
from ... import variants
from . import iopub as _iopub
from ..sandbox import proctree
from ..sandbox.proctree import PIDFILE_ENV, process_start
from .. import sandbox as _sandbox
from ..kernel.limits import user_namespace
from ..sandbox import tasks as _tasks
from ..course import THREAD_VARS, uses_gpu
from .untrusted_html import clean_content, clean_markdown, clean_outputs, reserved_ids

_GUARD = "__import__('attnlab.grading.kernel.guard', fromlist=['_'])"
_MAX_COPY = 64 * 2**20  # files larger than this are not copied into the kernel's scratch folder
#: Image types notebooks draw figures in; any other "image/..." key counts as text.
_FIGURES = frozenset({"image/png", "image/jpeg", "image/gif"})  # SVG can hold script: see untrusted_html


def error_output(ename: str, evalue: str):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"])


def _label(cell, index: int) -> str:
    gid = cell.metadata.get("nbgrader", {}).get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


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


def _record_pid(km) -> None:
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


def _uses_triton(nb) -> bool:
    """Whether a read-only cell of ``nb`` mentions Triton (04-09 import it there): the guard then watches
    Triton's interpreter. A learner's cell does not count, so learner code cannot switch the watch off."""
    return any(c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("locked") and "triton" in c.source
               for c in nb.cells)


def add_notes(nb, notes: list) -> None:
    """Append ``notes`` (plain strings, or :class:`~attnlab.core.outcome.Note` written with their kind) to
    ``nb.metadata.attnlab.notes``, each once."""
    nb.metadata.setdefault("attnlab", {}).setdefault("notes", [])
    for note in notes:
        note = note.to_json() if isinstance(note, Note) else note
        if note not in nb.metadata["attnlab"]["notes"]:
            nb.metadata["attnlab"]["notes"].append(note)


class GradingExecute(Execute):
    """nbgrader's Execute preprocessor with restarts, a notebook budget, isolation and the guard."""

    max_restarts = Integer(3, help="Kernel restarts per notebook after a dead or stuck kernel").tag(config=True)
    notebook_budget = Float(420.0, help="Seconds for a whole notebook, restarts included").tag(config=True)
    memory_limit_gb = Float(8.0, help="Memory of a sandboxed kernel as a whole, its children, shared memory and "
                                      "scratch folder included (a memory cgroup), and each of its processes' "
                                      "address space on the CPU (0: none)").tag(config=True)
    max_output_chars = Integer(100_000, help="Output kept per cell; the rest is dropped").tag(config=True)
    max_figure_chars = Integer(5_000_000, help="Figures (base64) kept per cell").tag(config=True)
    max_notebook_output_chars = Integer(20_000_000, help="Output kept per notebook, figures included "
                                                         "(a learner can add cells)").tag(config=True)
    kernel_threads = Integer(1, help="CPU threads of the kernel's pools (OMP_NUM_THREADS and the BLAS "
                                     "equivalents; 0: the grader's own). The tests' tensors are tiny: a "
                                     "second thread only spin-waits, costing CPU and no time saved "
                                     "(notes/grading/2026-12-01/profile.md)").tag(config=True)
    max_tasks = Integer(_tasks.MAX_TASKS, help="Processes and threads one sandboxed kernel may have (0: no "
                                               "bound; attnlab.grading.sandbox.tasks)").tag(config=True)
    guard = Bool(True, help="Install the integrity guard in the kernel").tag(config=True)
    isolate_cwd = Bool(True, help="Run the kernel in a scratch copy of the submission folder").tag(config=True)
    prewarm = Bool(True, help="Keep a spare kernel started for the next notebook").tag(config=True)
    fork_server = Bool(True, help="Fork sandboxed kernels from a process that imported torch once, where "
                                  "kernels run as accounts of their own (attnlab.grading.sandbox.forkserver; "
                                  "ATTNLAB_FORK_SERVER=0 also turns it off)").tag(config=True)
    sandbox = Bool(True, help="Run the kernel in a bubblewrap sandbox (attnlab.grading.sandbox); "
                              "False only on the instructor's explicit choice").tag(config=True)
    variant_student = Unicode(None, allow_none=True, help="Whose variant (attnlab.variants) the kernels "
                              "get: None, nbgrader's student id of the submission, with the tests' seeds "
                              "keyed by the course secret; else this id ('' for none: the release's "
                              "shapes) and the notebooks' own seeds (attnlab selfcheck)").tag(config=True)
    release_answers = Bool(True, help="Whether prediction answers for the release's shapes earn their "
                           "points under a student id (attnlab.variants: the notebook ran where the id was "
                           "not set, e.g. a laptop without $ATTNLAB_STUDENT); False for a class that always "
                           "works on a hub, where such answers lose their points as a copy does").tag(config=True)
    # a dead or stuck kernel is killed, not asked to shut down
    shutdown_kernel = Enum(["graceful", "immediate"], default_value="immediate").tag(config=True)

    # ------------------------------------------------------------------ the run, with restarts
    def preprocess(self, nb, resources=None, km=None):
        self._notes: list[str | Note] = []  # a Note where its kind decides something (contention)
        self._out_chars, self._fig_chars, self._nb_chars, self._truncated = 0, 0, 0, False
        self.error_on_timeout = {
            "ename": "CellTimeoutError",
            "evalue": f"this cell ran past the {self.timeout} s limit and was interrupted",
            "traceback": [f"\x1b[0;31mCellTimeoutError\x1b[0m: this cell ran past the {self.timeout} s "
                          f"limit and was interrupted"],
        }
        start = monotonic()
        skipped: dict[int, object] = {}
        self._gpu, self._next_gpu = self._gpu_plan(resources or {})
        if self.sandbox:
            ok, detail = _sandbox.check()
            if not ok:
                raise _sandbox.SandboxUnavailable(f"the notebook was not run: {detail}. {_sandbox.INSTALL_HINT}")
        run_dir = None
        try:
            for attempt in range(self.max_restarts + 1):
                for cell in nb.cells:
                    if cell.cell_type == "code":
                        cell.outputs, cell.execution_count = [], None
                NotebookClient.__init__(self, nb, km)
                self._nb_chars = 0  # the notebook's outputs start again with each run
                self.reset_execution_trackers()
                self._check_assign_resources(resources)
                self._current = None
                if run_dir and not self.sandbox:
                    _sandbox.remove_tree(run_dir)
                run_dir = tempfile.mkdtemp(prefix="attnlab-run-") if self.isolate_cwd and not self.sandbox else None
                try:
                    self._run_all(nb, resources, skipped, start, run_dir)
                    break
                except (DeadKernelError, CellTimeoutError) as exc:
                    index = self._current
                    if index is None:  # died while starting: nothing to skip, nothing more to try
                        raise
                    cell = nb.cells[index]
                    dead = isinstance(exc, DeadKernelError)
                    what = ("the kernel died while running this cell (a crash, os._exit, or the "
                            "out-of-memory killer)" if dead else
                            f"this cell ran past the {self.timeout} s limit and did not respond to an "
                            f"interrupt{self._stuck_busy}")
                    # a stuck cell that computed all along would be stuck alone too: no contention
                    kind = str if not dead and self._stuck_busy else contended
                    last = attempt == self.max_restarts or monotonic() - start > self.notebook_budget
                    if last:
                        cell.outputs.append(error_output("KernelDied" if dead else "CellTimeoutError",
                                                         f"{what}; grading stopped here"))
                        for later in nb.cells[index + 1:]:
                            if later.cell_type == "code":
                                later.outputs = [error_output(
                                    "NotRun", f"not run: the kernel failed in {_label(cell, index)} and "
                                              f"the grader had already restarted it {attempt} times")]
                        self._notes.append(kind(f"{_label(cell, index)}: {what}; the cells after it were not run"))
                        break
                    skipped[index] = error_output(
                        "KernelDied" if dead else "CellTimeoutError",
                        f"{what}; the grader restarted the kernel and ran the notebook again without this cell")
                    self._notes.append(kind(f"{_label(cell, index)}: {what}; the kernel was restarted and "
                                                 f"the notebook run again without this cell"))
        finally:
            if run_dir:
                _sandbox.remove_tree(run_dir)
        self.set_widgets_metadata()
        for index in clean_outputs(nb):  # outputs that update_display_data rewrote behind output()
            self._script_removed(index)
        add_notes(nb, self._notes)
        notes = nb.metadata.get("attnlab", {}).get("notes", [])
        if notes:
            reviews, others = split_reviews(notes)
            text = "**Grader's notes** (written by the autograder while grading this notebook):\n\n"
            if reviews:
                text += ("**Needs review** (what the checks could not rule out; a person will look at it):\n\n"
                         + "\n".join(f"- {n}" for n in reviews) + "\n\n")
            text += "\n".join(f"- {n}" for n in others)
            # notes quote learner code and file names: a backtick in a quoted line ends the code span
            text = text.rstrip() + "\n"
            nb.cells.insert(0, new_markdown_cell(clean_markdown(text, reserved_ids(nb)) or text))
        return nb, self.resources

    def _run_all(self, nb, resources, skipped, start, run_dir) -> None:
        spare = self._take_spare(nb)
        if spare is not None:
            self.km = spare
        elif self.sandbox:
            self.km = self._manager_class()(kernel_name=self._kernel_name(nb), config=self.config, gpu=self._gpu,
                                            max_tasks=self.max_tasks, fork_server=self.fork_server,
                                            memory_bytes=self._memory_bytes())
        if self.sandbox:
            run_dir = self.km.scratch  # the kernel's own folder, the only one it may write to
        if run_dir:
            self._fill_run_dir(run_dir, resources or {})
        kwargs = {"cwd": run_dir} if run_dir else {}
        env = self._kernel_env(self._gpu)
        if env is not None:
            kwargs["env"] = env
        try:
            self._run_in_kernel(nb, resources, skipped, start, run_dir, spare, kwargs)
        finally:
            if isinstance(self.km, _sandbox.SandboxedKernelManager):
                self.km.remove_folders()

    def _run_in_kernel(self, nb, resources, skipped, start, run_dir, spare, kwargs) -> None:
        with self.setup_kernel(**kwargs):
            if spare is None:
                _record_pid(self.km)
            self._start_spare(nb)
            info = self.wait_for_reply(self.kc.kernel_info())
            if info and "language_info" in info["content"]:
                nb.metadata["language_info"] = info["content"]["language_info"]
            if isinstance(self.km, _sandbox.SandboxedKernelManager):  # before any learner code runs
                self.km.close_ipc()  # its sockets are made: its account may not write there any more
                if self._kernel_eval(self.km.given_expression()) is None:  # into its scratch tmpfs
                    self._notes.append(f"{REVIEW}the grader could not copy the submission's files into the "
                                       "kernel's folder")
            # the variant is set before the guard's snapshot, which then keeps it as set
            student, salt = self._variant(resources)
            if self._kernel_eval(variants.grading_expression(student, salt, self.release_answers)) is None:
                self._notes.append(f"{REVIEW}the grader could not set the student's variant in the kernel: "
                                   "the release's shapes and seeds were used")
            else:  # for the report and the gradebook (attnlab.variants.record); the feedback shows it in
                # the cells that print the shapes and in its comments
                notebook = str((resources or {}).get("nbgrader", {}).get("notebook") or "")
                nb.metadata.setdefault("attnlab", {})["variant"] = variants.describe(notebook, student, salt)
            cwd = run_dir or os.getcwd()
            guarded = False
            if self.guard:
                # a random name for the guard in the notebook's namespace, set before any learner code
                # runs: the grader's later calls never go through __import__ or globals(), which a
                # solution cell can rebind to a stand-in guard that repairs nothing
                self._alias = f"_attnlab_guard_{secrets.token_hex(8)}"
                self._seal = None  # a new kernel: its guard's first reply sets it
                guarded = self._kernel_eval(
                    f"{_GUARD}.install(memory_limit_gb={self.memory_limit_gb!r}, cwd={cwd!r}, ns=globals(), "
                    f"alias={self._alias!r}, max_tasks={self.max_tasks!r}, "
                    f"grader_namespace={user_namespace()!r}, triton={_uses_triton(nb)!r}, "
                    f"own_account={getattr(self.km, 'account', None) is not None!r})") is not None
                if not guarded:
                    self._notes.append(f"{REVIEW}the grader could not install its integrity guard in the kernel")
            if not guarded:
                self._kernel_eval(f"__import__('json').dumps(__import__('os').chdir({cwd!r}))")
            over_budget = False
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                if index in skipped:
                    cell.outputs = [skipped[index]]
                    continue
                if over_budget or monotonic() - start > self.notebook_budget:
                    if not over_budget:
                        self._notes.append(contended(f"grading used up its {self.notebook_budget:g} s budget; "
                                                     f"{_label(cell, index)} and the cells after it were not run"))
                    over_budget = True
                    cell.outputs = [error_output("NotRun", f"not run: grading this notebook used up its "
                                                           f"{self.notebook_budget:g} s budget")]
                    continue
                self._current = index
                self._run_cell(cell, resources, index, guarded)
            self._current = None

    def _run_cell(self, cell, resources, index: int, guarded: bool) -> None:
        locked = bool(cell.metadata.get("nbgrader", {}).get("locked"))
        before = after = []
        if guarded and locked:
            before = self._guard_call("before_locked", cell)
        self._out_chars, self._fig_chars, self._truncated = 0, 0, False
        dropped = self._cell_dropped = self._dropped_messages()
        pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
        self._cell_start, self._stuck_busy = (monotonic(), proctree.thread_seconds(pid), pid), ""
        try:
            self.preprocess_cell(cell, resources, index)
        except CellTimeoutError:  # read now: the kernel is shut down before preprocess() sees this
            self._stuck_busy = self._busy_all_along()
            raise
        if self._dropped_messages() > dropped:
            self._oversized(cell, index)
        if guarded and locked:
            after = self._guard_call("after_locked", cell)
            self._confirm_error(cell, index)
        label = _label(cell, index)
        # a check's "needs review: ..." (attnlab.core.review.flag) is no repair: it goes to the notes as is
        # (the cell's output already shows it), and the report lists it apart
        for note in [n for n in [*before, *after] if is_review(n)]:
            self._notes.append(f"{note} ({label})")
        before = [n for n in before if not is_review(n)]
        after = [n for n in after if not is_review(n)]
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            # nbgrader fails a test cell on any stderr output: a warning the learner's code triggers
            # is not a failed test (failed checks raise), so keep such text as ordinary output
            for out in cell.outputs:
                if out.get("output_type") == "stream" and out.get("name") == "stderr":
                    out["name"] = "stdout"
        if before:
            # the grader's own messages go to stdout: nbgrader scores stderr as a failure
            cell.outputs.insert(0, new_output("stream", name="stdout", text=(
                "[grader] Before this cell ran, the grader undid changes that earlier code made: "
                + "; ".join(before) + ".\n")))
            self._notes.append(f"before {label} ran, the grader undid: " + "; ".join(before))
        if after:
            cell.outputs.append(new_output("stream", name="stdout", text=(
                "[grader] While this cell ran, code it called made changes that the grader undid: "
                + "; ".join(after) + ".\n")))
            self._notes.append(f"while {label} ran, the grader undid: " + "; ".join(after))
        timed_out = [o for o in cell.outputs if o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"]
        if timed_out:
            busy = self._busy_all_along()
            for out in timed_out:
                out["evalue"] += busy
                out["traceback"] = [*out.get("traceback", []), busy.lstrip(": ")] if busy else out.get("traceback", [])
            text = f"{label} ran past the {self.timeout} s limit and was interrupted{busy}"
            self._notes.append(text if busy else contended(text))  # computing all along: alone, the same

    # nbgrader fails a cell whose output stops before the kernel's idle status (output went missing). After a
    # message over the iopub cap, messages are lost while the socket connects again, that idle status perhaps
    # among them: the kernel's execute_reply (shell channel) then says how the cell ended, nbgrader adds its
    # error if the error's message was lost too, and the cell gets its "output truncated" note.
    _raise_on_iopub_timeout, _cell_dropped = True, 0

    @property
    def raise_on_iopub_timeout(self) -> bool:  # type: ignore[override]
        return self._raise_on_iopub_timeout and self._dropped_messages() <= self._cell_dropped

    @raise_on_iopub_timeout.setter
    def raise_on_iopub_timeout(self, value: bool) -> None:
        self._raise_on_iopub_timeout = bool(value)

    def _dropped_messages(self) -> int:
        """Connections the kernel client's iopub channel made again after one ended (a message over its
        cap: :mod:`attnlab.grading.worker.iopub`); 0 for a client without the cap."""
        channel = getattr(getattr(self, "kc", None), "_iopub_channel", None)
        return getattr(channel, "dropped", 0)

    def _oversized(self, cell, index: int) -> None:
        """A message of this cell was refused unread (a kernel that died instead raised DeadKernelError
        out of preprocess_cell, before this is asked)."""
        cap = _iopub.max_message_bytes()
        cell.outputs.append(new_output("stream", name="stdout", text=(
            f"\n[grader] Output truncated: this cell sent a message larger than the grader receives "
            f"({cap >> 20} MiB); it was dropped unread, with what the cell printed meanwhile.\n")))
        self._notes.append(f"{_label(cell, index)} sent output over {cap >> 20} MiB in one message; it was "
                           f"dropped unread (output truncated)")

    def _busy_all_along(self) -> str:
        """:data:`attnlab.core.outcome.RAN_ALL_ALONG` when one thread of the kernel's processes was on the CPU
        for at least 90 % of the cell that just ran past its limit, and CUDA never started (a GPU wait
        can spin), else "". Such a cell was not slowed by other workers: grading its notebook again
        alone (autograde's ``contended``) would spend the limit once more for the same result. One
        thread, not their sum: two starved threads could add up to a busy one."""
        t0, before, pid = getattr(self, "_cell_start", (None, {}, None))
        after = proctree.thread_seconds(pid)
        if t0 is None or not before or not after or proctree.uses_gpu(pid):
            return ""
        busiest = max(cpu - before.get(thread, 0.0) for thread, cpu in after.items())
        return RAN_ALL_ALONG if busiest >= 0.9 * (monotonic() - t0) else ""

    # ------------------------------------------------------------------ output limits
    def output(self, outs, msg, display_id, cell_index):
        kind = msg.get("msg_type")
        content = msg.get("content", {})
        if kind == "error":  # always kept (it is what fails a test), but bounded
            evalue, ename = str(content.get("evalue", "")), str(content.get("ename", ""))
            tb = [str(line)[:4000] + (" ...[truncated]" if len(str(line)) > 4000 else "")
                  for line in content.get("traceback", [])]
            if len(tb) > 60:  # an exception's _render_traceback_ can return any number of lines
                tb = tb[:40] + [f"... [{len(tb) - 50} traceback lines dropped by the grader]"] + tb[-10:]
            if len(evalue) > 4000 or len(ename) > 200 or tb != content.get("traceback", []):
                msg = {**msg, "content": {**content, "ename": ename[:200], "evalue": evalue[:4000], "traceback": tb}}
            return super().output(outs, msg, display_id, cell_index)
        if kind not in ("stream", "display_data", "execute_result", "update_display_data"):
            return super().output(outs, msg, display_id, cell_index)
        if kind != "stream":
            # formgrader shows it in the instructor's Jupyter page (attnlab.grading.worker.untrusted_html)
            content, changed = clean_content(content)
            msg = {**msg, "content": content}
            if changed:
                self._script_removed(cell_index)
        figures = 0
        if kind == "stream":
            size = len(content.get("text", ""))
        else:
            # figures (the notebooks' static plots are ~100 kB of base64 each) have a cap of their own;
            # any other data, and the metadata, count as text
            data = content.get("data", {})
            figures = sum(len(v) for mime, v in data.items() if mime in _FIGURES and isinstance(v, str))
            size = sum(len(v) if isinstance(v, str) else len(json.dumps(v, default=str))
                       for mime, v in data.items() if not (mime in _FIGURES and isinstance(v, str)))
            size += len(json.dumps(content.get("metadata", {}), default=str))
        room = self.max_output_chars - self._out_chars
        left = self.max_notebook_output_chars - self._nb_chars
        self._out_chars += size
        self._fig_chars += figures
        if size <= room and self._fig_chars <= self.max_figure_chars and size + figures <= left:
            self._nb_chars += size + figures
            return super().output(outs, msg, display_id, cell_index)
        out = None
        keep = min(room, left)
        if kind == "stream" and keep > 0:
            self._nb_chars += keep
            out = super().output(outs, {**msg, "content": {**content, "text": content["text"][:keep]}},
                                 display_id, cell_index)
        if not self._truncated:
            self._truncated = True
            limits = (f"{self.max_output_chars:,} characters of text or {self.max_figure_chars:,} of figures "
                      f"per cell, {self.max_notebook_output_chars:,} per notebook")
            outs.append(new_output("stream", name="stdout", text=(
                f"\n[grader] Output truncated: this cell printed more than the grader keeps ({limits}); "
                f"the rest was dropped.\n")))
            cell = self.nb.cells[cell_index]
            self._notes.append(f"{_label(cell, cell_index)} printed more than the grader keeps ({limits}); "
                               f"the output was truncated")
        return out

    # ------------------------------------------------------------------ helpers
    def _script_removed(self, cell_index: int) -> None:
        note = (f"{REVIEW}{_label(self.nb.cells[cell_index], cell_index)} displayed HTML, JavaScript, SVG, Markdown "
                f"or image attributes that could run script where the instructor reads it; it was removed or cleaned")
        if note not in self._notes:
            self._notes.append(note)

    def _guard_call(self, hook: str, cell) -> list[str]:
        """Run the guard's ``hook`` before or after a read-only cell; the repairs it made.

        The reply must echo a fresh random nonce: a stand-in for the guard (learner code that rebound
        the name) cannot, and then the cell gets an error output (a test cell scores 0) and the
        notebook is flagged for review.
        """
        nonce = secrets.token_hex(8)
        reply = self._kernel_eval(f"{self._alias}.{hook}(nonce={nonce!r})")
        self._raised = None
        when = 'before' if hook == 'before_locked' else 'after'
        if isinstance(reply, dict) and reply.get("nonce") == nonce and isinstance(reply.get("notes"), list):
            self._raised = reply.get("error")
            # the guard's snapshot must be as the guard left it at its last call (see guard._seal); once
            # it is not, every later call fails too (a cell's outputs are reset when it runs, so the
            # call after it must be the one that fails it)
            if self._seal is None or reply.get("seal") == self._seal:
                self._seal = reply.get("sealed")
                return [str(n) for n in reply["notes"]]
            what = f"the grader's integrity check found its snapshot changed {when} this cell"
        else:
            what = f"the grader's integrity check could not run {when} this cell"
        if not any(o.get("output_type") == "error" and o.get("ename") == "GuardBypassed" for o in cell.outputs):
            cell.outputs.append(error_output("GuardBypassed", f"{what}: code in the notebook replaced or broke it"))
        self._notes.append(f"{REVIEW}{what} ({_label(cell, self._current or 0)}): code in the notebook replaced "
                           f"or broke the grader's guard")
        return []

    def _confirm_error(self, cell, index: int) -> None:
        """A read-only cell that raised (as IPython saw it, reported by the guard) keeps an error output,
        even when the kernel's reply said it finished: code in the kernel can send the grader a reply
        with status ok and an idle status before the check fails (the real error then goes unheard)."""
        if not self._raised or any(o.get("output_type") == "error" for o in cell.outputs):
            return
        ename, _, evalue = str(self._raised).partition(": ")
        cell.outputs.append(error_output(ename or "Error", f"{evalue} (the kernel reported this cell as finished "
                                                         f"without an error: its reply was forged or its error hidden)"))
        self._notes.append(f"{REVIEW}{_label(cell, index)} raised {ename or 'an error'}, but the grader was told it "
                           f"finished without one: code in the notebook forged or hid the kernel's reply")

    async def _check_raise_for_error(self, cell, cell_index, exec_reply):
        # A cell whose code raised always shows an error output, so nbgrader scores a failed test as
        # failed: a custom exception handler (IPython's set_custom_exc) can swallow the traceback.
        content = (exec_reply or {}).get("content", {})
        if content.get("status") == "error" and not any(o.get("output_type") == "error" for o in cell.outputs):
            cell.outputs.append(error_output(str(content.get("ename") or "Error"),
                                             f"{content.get('evalue', '')} (the error printed no traceback)"))
        return await super()._check_raise_for_error(cell, cell_index, exec_reply)

    def _kernel_eval(self, expr: str):
        """Evaluate ``expr`` in the kernel's namespace without a cell; its JSON-text result, or None."""
        try:
            msg_id = self.kc.execute("", silent=True, store_history=False, user_expressions={"r": expr})
            reply = self.wait_for_reply(msg_id)
        except DeadKernelError:
            raise
        except Exception:  # noqa: BLE001
            return None
        if not reply:
            return None
        result = reply["content"].get("user_expressions", {}).get("r", {})
        if result.get("status") != "ok":
            return None
        try:
            return json.loads(ast.literal_eval(result["data"]["text/plain"]))
        except (ValueError, SyntaxError, KeyError, TypeError):
            return None

    def _variant(self, resources) -> tuple[str | None, int | None]:
        """(student id, seed key) for this notebook's kernel: see ``variant_student``."""
        if self.variant_student is not None:
            return self.variant_student or None, None
        student = (resources or {}).get("nbgrader", {}).get("student")
        if not student:
            return None, None
        from nbgrader.coursedir import CourseDirectory

        from ..course import Course, course_secret

        root = CourseDirectory(config=self.config).root
        return student, variants.seed_key(course_secret(Course(Path(root))), student)

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
        _record_pid(km)
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
