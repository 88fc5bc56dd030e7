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

Review notes from the checks (:func:`attnlab.core.review.flag`) are kept as they are, so the report can
list them apart. Everything it noticed is appended to ``notebook.metadata.attnlab.notes`` (with its kind
where the kind decides something: :mod:`attnlab.core.outcome`) and shown to the learner in a "Grader's
notes" cell at the top of the autograded notebook (and so in the feedback).
"""
# Length: a little over 400 lines, one job (running the cells: restarts, the budget, the guard's calls,
# the notes). Its other parts are mixins of GradingExecute in modules of their own, output limits
# (.outputs.OutputLimits) and kernel start with the spare kernel (.kernels.KernelStart): they share
# nbclient's kernel client and cell loop, so they cannot be separate nbgrader preprocessors.

from __future__ import annotations

import ast
import json
import os
import secrets
import tempfile
from pathlib import Path
from time import monotonic

from nbclient.client import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_markdown_cell, new_output
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Float, Integer, Unicode

from ...core.outcome import RAN_ALL_ALONG, Note, contended_note, is_review, split_reviews
from ...core.review import PREFIX as REVIEW
from ... import variants
from ..sandbox import proctree
from .. import sandbox as _sandbox
from ..kernel.limits import user_namespace
from .kernels import KernelStart, drop_spare, record_pid, spare  # noqa: F401 (drop_spare, spare: public here)
from .outputs import OutputLimits, cell_label, error_output
from .untrusted_html import clean_markdown, clean_outputs, reserved_ids

_GUARD = "__import__('attnlab.grading.kernel.guard', fromlist=['_'])"



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


class GradingExecute(OutputLimits, KernelStart, Execute):
    """nbgrader's Execute preprocessor with restarts, a notebook budget, isolation and the guard; its output
    limits (:class:`.outputs.OutputLimits`) and kernel start (:class:`.kernels.KernelStart`) are parts of it."""

    max_restarts = Integer(3, help="Kernel restarts per notebook after a dead or stuck kernel").tag(config=True)
    notebook_budget = Float(420.0, help="Seconds for a whole notebook, restarts included").tag(config=True)
    guard = Bool(True, help="Install the integrity guard in the kernel").tag(config=True)
    isolate_cwd = Bool(True, help="Run the kernel in a scratch copy of the submission folder").tag(config=True)
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
                    kind = str if not dead and self._stuck_busy else contended_note
                    last = attempt == self.max_restarts or monotonic() - start > self.notebook_budget
                    if last:
                        cell.outputs.append(error_output("KernelDied" if dead else "CellTimeoutError",
                                                         f"{what}; grading stopped here"))
                        for later in nb.cells[index + 1:]:
                            if later.cell_type == "code":
                                later.outputs = [error_output(
                                    "NotRun", f"not run: the kernel failed in {cell_label(cell, index)} and "
                                              f"the grader had already restarted it {attempt} times")]
                        self._notes.append(kind(f"{cell_label(cell, index)}: {what}; the cells after it were not run"))
                        break
                    skipped[index] = error_output(
                        "KernelDied" if dead else "CellTimeoutError",
                        f"{what}; the grader restarted the kernel and ran the notebook again without this cell")
                    self._notes.append(kind(f"{cell_label(cell, index)}: {what}; the kernel was restarted and "
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
                record_pid(self.km)
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
                        self._notes.append(contended_note(f"grading used up its {self.notebook_budget:g} s budget; "
                                                     f"{cell_label(cell, index)} and the cells after it were not run"))
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
        label = cell_label(cell, index)
        # a check's "needs review: ..." (attnlab.core.review.flag) is no repair: it goes to the notes as is
        # (the cell's output already shows it), and the report lists it apart
        for note in [n for n in [*before, *after] if is_review(n)]:
            self._notes.append(f"{Note.from_json(note).text} ({label})")
        # a check's own note (attnlab.core.review.note, typed): what it told the learner, not a repair
        for note in [n for n in [*before, *after] if isinstance(n, dict) and not is_review(n)]:
            self._notes.append(f"{Note.from_json(note).text} ({label})")
        before = [n for n in before if isinstance(n, str) and not is_review(n)]
        after = [n for n in after if isinstance(n, str) and not is_review(n)]
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
            self._notes.append(text if busy else contended_note(text))  # computing all along: alone, the same


    def _busy_all_along(self) -> str:
        """:data:`attnlab.core.outcome.RAN_ALL_ALONG` when one thread of the kernel's processes was on the CPU
        for at least 90 % of the cell that just ran past its limit, and CUDA never started (a GPU wait
        can spin), else "". Such a cell was not slowed by other workers: grading its notebook again
        alone (:func:`attnlab.grading.host.contention.contended`) would spend the limit once more for the same result. One
        thread, not their sum: two starved threads could add up to a busy one."""
        t0, before, pid = getattr(self, "_cell_start", (None, {}, None))
        after = proctree.thread_seconds(pid)
        if t0 is None or not before or not after or proctree.uses_gpu(pid):
            return ""
        busiest = max(cpu - before.get(thread, 0.0) for thread, cpu in after.items())
        return RAN_ALL_ALONG if busiest >= 0.9 * (monotonic() - t0) else ""


    def _guard_call(self, hook: str, cell) -> list:
        """Run the guard's ``hook`` before or after a read-only cell; the repairs it made (text), the checks'
        review notes (text) and their other notes (dicts with their kind).

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
                return [n if isinstance(n, dict) else str(n) for n in reply["notes"]]
            what = f"the grader's integrity check found its snapshot changed {when} this cell"
        else:
            what = f"the grader's integrity check could not run {when} this cell"
        if not any(o.get("output_type") == "error" and o.get("ename") == "GuardBypassed" for o in cell.outputs):
            cell.outputs.append(error_output("GuardBypassed", f"{what}: code in the notebook replaced or broke it"))
        self._notes.append(f"{REVIEW}{what} ({cell_label(cell, self._current or 0)}): code in the notebook replaced "
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
        self._notes.append(f"{REVIEW}{cell_label(cell, index)} raised {ename or 'an error'}, but the grader was told it "
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
