"""Build hook: ship the course's instructor notebooks (with their hidden tests) inside the package.

``attnlab selfcheck`` grades a learner's notebook with the hidden tests; a learner who installed the
package with pip (Colab, a bare Jupyter) has no checkout, so every wheel carries a copy of
``source/attention_kernels/*.ipynb`` and ``nbgrader_config.py`` under ``attnlab/_course/``, made here at
build time from the committed files. (Hidden tests are public by design: the repository is.)
Everything else about the package is declared in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class build_py_with_course(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own source/ (see attnlab.course_files)
        dest = Path(self.build_lib) / "attnlab" / "_course"
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "source").mkdir(parents=True)
        shutil.copytree(ROOT / "source", dest / "source", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.pyc", "__pycache__"))
        shutil.copy(ROOT / "nbgrader_config.py", dest / "nbgrader_config.py")


setup(cmdclass={"build_py": build_py_with_course})
