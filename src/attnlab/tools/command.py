"""The ``attnlab`` command: the grader's commands (:mod:`attnlab.grading.host.cli`, whose docstring lists
them all) and the learner's tools (``lab``, ``selfcheck``, ``doctor``), which sit in the layer above it."""

from __future__ import annotations

import argparse
import sys

from ..grading.host import cli
from ..grading.worker import gradebook
from . import doctor, lab, selfcheck


def _learner_commands(sub, course: argparse.ArgumentParser) -> None:
    lab.add_parser(sub, parents=[course])
    selfcheck.add_parser(sub)
    doctor.add_parser(sub)


def parser() -> argparse.ArgumentParser:
    """The whole ``attnlab`` parser (every command)."""
    return cli.parser(_learner_commands)


def main(argv: list[str] | None = None) -> int:
    """Run ``attnlab ARGS`` (``argv``, default ``sys.argv[1:]``); its exit status."""
    p = parser()
    args = p.parse_args(argv)
    gradebook.apply_db_option(args)
    if args.command is None:  # a bare `attnlab`: say what there is
        p.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
