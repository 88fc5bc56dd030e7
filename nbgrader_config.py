"""nbgrader configuration of the Attention Kernels Lab (read by every nbgrader command run here)."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "attention-kernels"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# The gradebook: SQLite beside the course (gradebook.db) unless ATTNLAB_DB_URL names another
# database, e.g. a PostgreSQL server shared by shards on several machines
# (postgresql+psycopg://USER@HOST/DB; see attnlab.grading.worker.gradebook). Never seen by a notebook's kernel.
if os.environ.get("ATTNLAB_DB_URL"):
    c.CourseDirectory.db_url = os.environ["ATTNLAB_DB_URL"]
    # Every nbgrader command and formgrader wait for a server that restarts instead of failing.
    from attnlab.grading.worker.gradebook import reconnect_on_loss  # noqa: E402

    reconnect_on_loss()
# Never copied into release/ nor over a student's files at autograde; the grader's notes on a
# submission's files (attnlab.grading.host.submissions) stay in submitted/, out of the feedback.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "*.py", ".DS_Store",
                            "feedback", "*.csv", "*.png", ".attnlab-submission.json"]

# Execution. Test cells finish in seconds on one CPU core (Triton through its interpreter);
# each call of learner code is also limited to 20 s inside the checks (attnlab.verify;
# ATTNLAB_CALL_LIMIT_S overrides it), so an endless loop fails its check quickly and this
# per-cell timeout is only the backstop. The ATTNLAB_* variables let the course's own tests
# grade hangs in seconds.
c.Execute.timeout = int(os.environ.get("ATTNLAB_CELL_TIMEOUT_S", 90))
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120
# Widgets' state is neither kept in memory nor written into the autograded notebook: no check reads it,
# and a cell could send gigabytes of it past every output cap (red team, 2026-12-02: 400 MB per notebook).
c.Execute.store_widget_state = False
# A kernel outside the sandbox talks over TCP: encrypt it with CurveZMQ keys where jupyter_client (8.10
# on) can hand them out and the kernel supports them (ipykernel 7, which otherwise warns at every start
# that it runs "over TCP without encryption"). Sandboxed kernels use Unix sockets: nothing to encrypt.
from jupyter_client.manager import KernelManager  # noqa: E402

if "transport_encryption" in KernelManager.class_trait_names():
    c.KernelManager.transport_encryption = "auto"
    c.SandboxedKernelManager.transport_encryption = "disabled"
# Learner output is capped in the autograded notebook and the feedback.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60

# Autograde with the course's hardened steps (src/attnlab/grading/): RepairSubmission fixes
# copied, split, deleted or stripped cells and Colab-saved notebooks before nbgrader checks them;
# GradingExecute survives dead and stuck kernels (restart, rerun without the cell), bounds the
# notebook's time, isolates the kernel's working directory, caps its memory and output, and
# guards the tests' references. The rest is nbgrader's own list, unchanged.
c.Autograde.sanitize_preprocessors = [
    "attnlab.grading.worker.repair.RepairSubmission",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "attnlab.grading.worker.execute.GradingExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.GradingExecute.max_restarts = 3
c.GradingExecute.notebook_budget = float(os.environ.get("ATTNLAB_NOTEBOOK_BUDGET_S", 420))
c.GradingExecute.memory_limit_gb = float(os.environ.get("ATTNLAB_KERNEL_MEMORY_GB", 8))
c.GradingExecute.max_output_chars = 100_000
# Processes and threads per kernel (attnlab.grading.sandbox.tasks, ATTNLAB_KERNEL_TASKS): a fork bomb stalls only
# its own notebook.
from attnlab.grading.sandbox.tasks import max_tasks  # noqa: E402

c.GradingExecute.max_tasks = max_tasks()
# One CPU thread per pool in each kernel (torch's intra-op pool, BLAS): the tests' tensors are tiny and
# a second thread only spin-waits (notes/grading/2026-12-01/profile.md). 0: the grader's own setting.
c.GradingExecute.kernel_threads = int(os.environ.get("ATTNLAB_KERNEL_THREADS", 1))
# Every kernel runs in a bubblewrap sandbox (attnlab.grading.sandbox): its only writable place is a
# scratch copy of the submission, and it cannot see the course folder, the gradebook or other
# students. Off only when the instructor passes --unsafe-no-sandbox (which sets this variable).
c.GradingExecute.sandbox = os.environ.get("ATTNLAB_UNSAFE_NO_SANDBOX") != "1"

# Feedback marks the answers still to be graded by hand (not a score of 0) and gives the autograded
# score apart; export writes a row per graded submission only, with the points still to be graded
# (attnlab.grading.host.feedback).
c.GenerateFeedback.exporter_class = "attnlab.grading.host.feedback.FeedbackExporter"
c.ExportApp.plugin_class = "attnlab.grading.host.feedback.GradesExport"

# Restore test cells a learner deleted, from the gradebook's copy of the source.
c.OverwriteCells.add_missing_cells = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
