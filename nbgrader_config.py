"""nbgrader configuration of the Attention Kernels Lab (read by every nbgrader command run here)."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "attention-kernels"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# Never copied into release/ nor over a student's files at autograde.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "*.py", ".DS_Store",
                            "feedback", "*.csv", "*.png"]

# Execution. Test cells finish in seconds on one CPU core (Triton through its interpreter);
# each call of learner code is also limited to 20 s inside the checks (attnlab.verify), so an
# endless loop fails its check quickly and this per-cell timeout is only the backstop.
c.Execute.timeout = 90
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120
# Learner output is capped in the autograded notebook and the feedback.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60

# Restore test cells a learner deleted, from the gradebook's copy of the source.
c.OverwriteCells.add_missing_cells = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
