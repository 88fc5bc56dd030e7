"""What the grader keeps of a cell's outputs, and what it writes there.

:class:`OutputLimits` is a part of :class:`attnlab.grading.worker.execute.GradingExecute` (a mixin: it
shares nbclient's kernel client and cell loop with the other parts): it bounds each cell's text and
figures and the notebook's total, shortens tracebacks (error outputs are always kept: they fail a
test), cleans displayed HTML, SVG and script out of what formgrader shows
(:mod:`attnlab.grading.worker.untrusted_html`), and notes a message the kernel sent over the iopub cap
(:mod:`attnlab.grading.worker.iopub`). Its traits are set in nbgrader_config.py as
``c.GradingExecute.max_output_chars`` and so on. :func:`error_output` and :func:`cell_label` are the
error output and the cell's name that every step of the grader writes.
"""

from __future__ import annotations

import json

from nbformat.v4 import new_output
from traitlets import HasTraits, Integer

from ...core.review import PREFIX as REVIEW
from . import iopub as _iopub
from .untrusted_html import clean_content

#: Image types notebooks draw figures in; any other "image/..." key counts as text.
FIGURES = frozenset({"image/png", "image/jpeg", "image/gif"})  # SVG can hold script: see untrusted_html


def error_output(ename: str, evalue: str):
    """An error output (``ename``: ``evalue``) as the grader writes it into a cell: it fails a test cell."""
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"])


def cell_label(cell, index: int) -> str:
    """How reports and notes name a cell: ``cell 'grade_id'``, else ``cell N`` (1-based)."""
    gid = cell.metadata.get("nbgrader", {}).get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


class OutputLimits(HasTraits):
    """The output limits of :class:`~attnlab.grading.worker.execute.GradingExecute` (module docstring)."""

    max_output_chars = Integer(100_000, help="Output kept per cell; the rest is dropped").tag(config=True)
    max_figure_chars = Integer(5_000_000, help="Figures (base64) kept per cell").tag(config=True)
    max_notebook_output_chars = Integer(20_000_000, help="Output kept per notebook, figures included "
                                                         "(a learner can add cells)").tag(config=True)

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
        self._notes.append(f"{cell_label(cell, index)} sent output over {cap >> 20} MiB in one message; it was "
                           f"dropped unread (output truncated)")

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
            figures = sum(len(v) for mime, v in data.items() if mime in FIGURES and isinstance(v, str))
            size = sum(len(v) if isinstance(v, str) else len(json.dumps(v, default=str))
                       for mime, v in data.items() if not (mime in FIGURES and isinstance(v, str)))
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
            self._notes.append(f"{cell_label(cell, cell_index)} printed more than the grader keeps ({limits}); "
                               f"the output was truncated")
        return out

    def _script_removed(self, cell_index: int) -> None:
        """Note for review that a cell displayed what could run script where the instructor reads it."""
        note = (f"{REVIEW}{cell_label(self.nb.cells[cell_index], cell_index)} displayed HTML, JavaScript, SVG, Markdown "
                f"or image attributes that could run script where the instructor reads it; it was removed or cleaned")
        if note not in self._notes:
            self._notes.append(note)
