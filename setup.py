"""Build hook: ship the learner copy of the course notebooks inside the package, for ``attnlab selfcheck``.

A learner who installed the package with pip (Colab, a bare Jupyter) has no checkout, so the
package carries, under ``attnlab/_course/``, what grading a learner's notebook needs and no more:
per notebook the release version (solutions and model answers already cleared by nbgrader) with the
test cells' hidden tests put back, ``nbgrader_config.py`` and a manifest (see
``src/attnlab/course_files.py``, loaded here by path: the package's dependencies are not installed
at build time). ``ATTNLAB_PACKAGE_HIDDEN_TESTS=0`` leaves the hidden tests out.

A wheel built from the repository makes the learner copy from ``source/`` and ``release/`` (from
``release/`` alone, without hidden tests, where there is no ``source/``: a public copy of a private
course); the sdist carries the learner copy ready-made (``learner_course/``) instead of ``source/``,
and a wheel built from the sdist copies it. Everything else is declared in pyproject.toml.
"""

import importlib.util
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
PREBUILT = "learner_course"  # the sdist's ready-made learner copy


def _course_files():
    spec = importlib.util.spec_from_file_location("_attnlab_course_files", ROOT / "src" / "attnlab" / "course_files.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _write_learner_course(dest: Path) -> None:
    cf = _course_files()
    if (ROOT / "source").is_dir():
        cf.write_learner_course(ROOT, dest, hidden_tests=cf.hidden_tests_wanted())
    elif (ROOT / PREBUILT / cf.MANIFEST).is_file():
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(ROOT / PREBUILT, dest)
    elif (ROOT / "release").is_dir():  # a public copy of a private course: release/ only, no hidden tests
        cf.write_learner_course(ROOT, dest, hidden_tests=False)
    else:
        raise SystemExit(f"attnlab: none of source/, release/, {PREBUILT}/ is here: cannot build the package")


class build_py_with_course(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own source/ and release/ (attnlab.course_files)
        _write_learner_course(Path(self.build_lib) / "attnlab" / "_course")


class sdist_with_course(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        _write_learner_course(Path(base_dir) / PREBUILT)


setup(cmdclass={"build_py": build_py_with_course, "sdist": sdist_with_course})
