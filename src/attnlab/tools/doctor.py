"""``attnlab doctor``: is this environment ready for the course? Each check says OK, NOTE, WARN or FAIL,
and what to do about anything that is not OK.

Checks: Python; the support package and where its hidden tests come from; PyTorch and whether a
GPU is used or Triton runs through its CPU interpreter (with a tiny kernel run through it); Triton;
nbgrader, JupyterLab and nbgrader's lab and server extensions (for the Validate button);
ipywidgets and its lab extension (for the interactive figures); Google Colab; bubblewrap (the
sandbox that `attnlab autograde` and `attnlab selfcheck` run every notebook in); on a JupyterHub
(detected, or asked for with --hub), nbgrader's exchange folder, its permissions and the server
extensions that use it.
The exit status is 1 when any check FAILs (the course cannot run), else 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..grading.course import tool_env
from . import hub_check
from .report import FAIL, NOTE, OK, WARN, Check

__all__ = ["Check", "OK", "NOTE", "WARN", "FAIL", "iter_checks", "run_checks", "check_sandbox", "check_hub",
           "format_checks", "main"]

NBGRADER_VERSION = "0.9.6"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (e.g. "nbgrader"), or None when it is not installed."""
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def jupyter_output(*args: str, timeout: float = 60) -> str:
    """Output (stdout and stderr, colours removed) of ``python -m jupyter ARGS`` with this interpreter."""
    env = tool_env()
    try:
        p = subprocess.run([sys.executable, "-m", "jupyter", *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(could not run jupyter {' '.join(args)}: {exc})"
    return _ANSI.sub("", p.stdout + p.stderr)


def _check_python() -> Check:
    v = sys.version_info
    text = f"{v.major}.{v.minor}.{v.micro} at {sys.executable}"
    if v < (3, 11):
        return Check("Python", FAIL, text, "nbgrader 0.9 and this course need Python >= 3.11.")
    return Check("Python", OK, text)


def _check_package() -> list[Check]:
    import attnlab

    from ..course_files import find

    here = Path(attnlab.__file__).resolve().parent
    checks = [Check("attnlab", OK, f"{attnlab.__version__} at {here}")]
    files = find()
    if files is None:
        checks.append(Check("hidden tests", WARN, "the course's notebooks are not found",
                            "`attnlab selfcheck` needs them: reinstall attnlab from the course repository "
                            "(its wheels carry them), or set ATTNLAB_COURSE to a checkout of the course."))
    else:
        where = "shipped with the package" if files.root == here / "_course" else f"in {files.root}"
        per = files.manifest()["assignments"]  # every assignment: selfcheck grades them all
        n = f"{sum(map(len, per.values()))} course notebooks ({', '.join(f'{len(v)} {a}' for a, v in per.items())})"
        if files.hidden_tests:
            checks.append(Check("hidden tests", OK, f"{n} {where} (for `attnlab selfcheck`)"))
        else:
            checks.append(Check("hidden tests", NOTE, f"{n} {where}, built without hidden "
                                "tests: `attnlab selfcheck` runs the visible tests only"))
    return checks


def _check_torch() -> list[Check]:
    try:
        import torch
    except ImportError:
        return [Check("PyTorch", FAIL, "not installed", "pip install 'torch>=2.3' (on Colab it is preinstalled).")]
    checks = []
    if _vtuple(torch.__version__) < (2, 3):
        checks.append(Check("PyTorch", FAIL, torch.__version__, "the course needs torch >= 2.3: pip install -U torch"))
    else:
        checks.append(Check("PyTorch", OK, f"{torch.__version__} (CUDA build {torch.version.cuda or 'none'})"))
    from ..core.device import FORCE_ENV, runtime

    forced = os.environ.get(FORCE_ENV, "").lower() == "cpu"
    if torch.cuda.is_available() and not forced:
        major, minor = torch.cuda.get_device_capability()
        rt = runtime()
        detail = f"GPU mode: {torch.cuda.get_device_name()} (compute capability {major}.{minor})"
        if rt.interpret:
            checks.append(Check("device", WARN, detail + ", but TRITON_INTERPRET=1 is set",
                                "Unset TRITON_INTERPRET to compile kernels for the GPU."))
        elif major < 8:
            checks.append(Check("device", WARN, detail,
                                "bfloat16 and some Triton features need compute capability >= 8.0 (Ampere); "
                                "the notebooks' float32/float16 paths still run."))
        else:
            checks.append(Check("device", OK, detail))
    else:
        why = f"{FORCE_ENV}=cpu is set" if forced else "no CUDA GPU visible to PyTorch"
        checks.append(Check("device", NOTE, f"interpreter mode: {why}; Triton kernels run on the CPU "
                                            "through TRITON_INTERPRET=1 (small sizes, timings meaningless)",
                            "Fine for every notebook's graded parts; the measurements of 04-09 (06's sweep, "
                            "08's and 09's timings) need a GPU: on Colab, Runtime > Change runtime type > GPU."))
    return checks


_SMOKE = """\
import os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl

@triton.jit
def _add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

x = torch.arange(10, dtype=torch.float32)
y = torch.full_like(x, float("nan"))
_add[(1,)](x, y, 10, BLOCK=16)
assert torch.equal(y, x + 1), y
print("ok")
"""


def _check_triton() -> list[Check]:
    v = installed_version("triton")
    if v is None:
        if sys.platform != "linux":
            return [Check("Triton", WARN, "not installed (Triton ships Linux wheels only)",
                          "Notebooks 01-03 run without it; for 04-06 use Colab or WSL2.")]
        return [Check("Triton", FAIL, "not installed", "pip install triton (it usually comes with torch).")]
    return [Check("Triton", OK, v)]


def _check_triton_run() -> list[Check]:
    """A tiny kernel through Triton's interpreter, in a Python of its own (it imports torch: slow)."""
    if installed_version("triton") is None:
        return []
    with tempfile.TemporaryDirectory(prefix="attnlab-doctor-") as tmp:
        script = Path(tmp) / "smoke.py"  # @triton.jit reads the kernel's source from a file
        script.write_text(_SMOKE)
        try:
            p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
            ok, out = p.returncode == 0 and "ok" in p.stdout, (p.stdout + p.stderr).strip()
        except subprocess.TimeoutExpired:
            ok, out = False, "timed out after 120 s"
    if ok:
        return [Check("Triton interpreter", OK, "a tiny kernel ran correctly with TRITON_INTERPRET=1")]
    last = out.splitlines()[-1] if out else "no output"
    return [Check("Triton interpreter", FAIL, f"a tiny kernel failed: {last}",
                  "Reinstall matching torch and triton (pip install -U torch triton), and numpy.")]


def _check_jupyter() -> list[Check]:
    checks = []
    nbg = installed_version("nbgrader")
    lab = installed_version("jupyterlab")
    if nbg is None:
        checks.append(Check("nbgrader", NOTE, "not installed",
                            f"Needed for Validate and `attnlab selfcheck`: pip install 'nbgrader=={NBGRADER_VERSION}' "
                            "(instructors and students in JupyterLab: pip install -e '.[course]')."))
    elif nbg != NBGRADER_VERSION:
        checks.append(Check("nbgrader", WARN, nbg, f"The course is built and graded with nbgrader {NBGRADER_VERSION}: "
                                                   f"pip install 'nbgrader=={NBGRADER_VERSION}'."))
    else:
        checks.append(Check("nbgrader", OK, nbg))
    if lab is None:
        in_colab = "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG")
        checks.append(Check("JupyterLab", NOTE, "not installed" + (" (Colab has its own frontend)" if in_colab else ""),
                            "" if in_colab else "pip install 'jupyterlab>=4,<5' to work in JupyterLab."))
        return checks
    if _vtuple(lab) < (4,):
        checks.append(Check("JupyterLab", FAIL, lab, "nbgrader 0.9 needs JupyterLab 4: pip install 'jupyterlab>=4,<5'."))
    else:
        checks.append(Check("JupyterLab", OK, lab))
    return checks


def _check_extensions() -> list[Check]:
    """nbgrader's and the widgets' lab and server extensions, where JupyterLab is installed (each listing
    starts a Jupyter process: seconds)."""
    if installed_version("jupyterlab") is None:
        return []
    checks = []
    nbg = installed_version("nbgrader")
    with ThreadPoolExecutor(2) as pool:
        labext_f = pool.submit(jupyter_output, "labextension", "list")
        srvext_f = pool.submit(jupyter_output, "server", "extension", "list")
        labext, srvext = labext_f.result(), srvext_f.result()
    if nbg is not None:
        m = re.search(r"@jupyter/nbgrader\S*\s+v?(\S+)\s+(enabled|disabled)(\s+OK)?", labext)
        if not m:
            checks.append(Check("nbgrader lab extension", FAIL, "not found by `jupyter labextension list`",
                                f"Reinstall nbgrader (pip install --force-reinstall 'nbgrader=={NBGRADER_VERSION}') "
                                "in the environment that runs JupyterLab."))
        elif m.group(2) != "enabled":
            checks.append(Check("nbgrader lab extension", FAIL, f"{m.group(1)} is disabled",
                                "jupyter labextension enable @jupyter/nbgrader, then reload JupyterLab."))
        else:
            checks.append(Check("nbgrader lab extension", OK, f"@jupyter/nbgrader {m.group(1)} enabled"))
        validate = re.search(r"nbgrader\.server_extensions\.validate_assignment\s+(enabled|disabled)", srvext)
        if not validate or validate.group(1) != "enabled":
            checks.append(Check("nbgrader server extension", FAIL, "validate_assignment is not enabled: the "
                                "Validate button cannot work",
                                "jupyter server extension enable --sys-prefix nbgrader.server_extensions.validate_assignment"))
        else:
            checks.append(Check("nbgrader server extension", OK, "validate_assignment enabled (the Validate button)"))
    widgets_ext = re.search(r"@jupyter-widgets/jupyterlab-manager\S*\s+v?(\S+)\s+(enabled|disabled)", labext)
    if not widgets_ext or widgets_ext.group(2) != "enabled":
        checks.append(Check("widgets lab extension", WARN, "@jupyter-widgets/jupyterlab-manager not enabled",
                            "pip install 'ipywidgets>=8' jupyterlab_widgets; without it the interactive figures "
                            "show as static images."))
    else:
        checks.append(Check("widgets lab extension", OK, f"jupyterlab-manager {widgets_ext.group(1)} enabled"))
    return checks


def _check_widgets() -> list[Check]:
    checks = []
    ipw = installed_version("ipywidgets")
    if ipw is None:
        checks.append(Check("ipywidgets", WARN, "not installed", "pip install 'ipywidgets>=8'; the figures are "
                                                                 "static without it."))
    elif _vtuple(ipw) >= (8,) or "google.colab" in sys.modules:  # Colab renders its own ipywidgets 7
        checks.append(Check("ipywidgets", OK, ipw))
    else:
        checks.append(Check("ipywidgets", WARN, ipw, "JupyterLab 4 renders ipywidgets 8: pip install -U 'ipywidgets>=8' "
                                                     "(the figures are static images until then)."))
    mpl = installed_version("matplotlib")
    checks.append(Check("matplotlib", OK, mpl) if mpl else
                  Check("matplotlib", FAIL, "not installed", "pip install matplotlib"))
    if "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG"):
        checks.append(Check("Colab", NOTE, "running on Google Colab",
                            "Each notebook's first cell installs attnlab; choose a GPU runtime for 04-06."))
    return checks


def check_sandbox() -> Check:
    """The grading sandbox's check (:mod:`attnlab.grading.sandbox`): WARN without a working bubblewrap (with
    how to install it); OK with it, or NOTE where a kernel's tasks or memory go unbounded or kernels run
    without the seccomp filter (the detail says which, and why). Starts a sandbox: a second or so."""
    try:
        from ..grading.sandbox import INSTALL_HINT, check
    except ImportError as exc:  # jupyter_client missing: grading cannot run here anyway
        return Check("grading sandbox", NOTE, f"not checked ({exc})")
    ok, detail = check()
    if ok:
        from ..grading.sandbox import describe_seccomp
        from ..grading.sandbox.tasks import describe, describe_memory

        (bounded, tasks), (counted, memory), (filtered, calls) = describe(), describe_memory(), describe_seccomp()
        return Check("grading sandbox", OK if bounded and counted and filtered else NOTE,
                     f"{detail}; {tasks}; {memory}; {calls}")  # NOTE: graders only
    return Check("grading sandbox", WARN, detail,
                 f"Graders need it: `attnlab autograde` runs every notebook in a bubblewrap sandbox and refuses "
                 f"to start without it: {INSTALL_HINT} (--unsafe-no-sandbox grades without it, at a risk). "
                 f"`attnlab selfcheck` checks your own notebooks without it.")


def check_hub() -> list[Check]:
    """The JupyterHub set-up of this environment (:mod:`attnlab.tools.hub_check`): nbgrader's exchange and
    the server extensions that use it, read from a ``jupyter server extension list`` process (seconds)."""
    # the listing imports every extension: slow when the machine is busy
    return hub_check.check_hub(jupyter_output("server", "extension", "list", timeout=180))


def iter_checks(smoke: bool = True, jupyter: bool = True, hub: bool | None = None) -> Iterator[Check]:
    """Every check, in report order, each as soon as it is known: the quick ones first, then the slow
    ones (a process each: the tiny Triton kernel if ``smoke``, the Jupyter extension listings if
    ``jupyter``, the sandbox, the hub's set-up if ``hub``, by default where a hub is detected), which
    start at once, side by side, in the background."""
    slow = [_check_triton_run] if smoke else []
    slow += [_check_extensions] if jupyter else []
    slow.append(lambda: [check_sandbox()])
    slow += [check_hub] if (hub_check.hub_detected() if hub is None else hub) else []
    with ThreadPoolExecutor(len(slow)) as pool:
        started = [pool.submit(f) for f in slow]
        yield _check_python()
        yield from _check_package()
        if jupyter:
            yield from _check_jupyter()
        yield from _check_widgets()
        yield from _check_torch()  # imports torch: seconds
        yield from _check_triton()
        for f in started:
            yield from f.result()


def run_checks(smoke: bool = True, jupyter: bool = True, hub: bool | None = None) -> list[Check]:
    """Every check, in report order (:func:`iter_checks`)."""
    return list(iter_checks(smoke, jupyter, hub))


HEADER = "attnlab doctor: is this environment ready for the Attention Kernels Lab?"


def format_check(c: Check) -> str:
    """One check's line, with its advice below it when it is not OK."""
    lines = [f"  {c.status:<4}  {c.name:<26} {c.detail}"]
    if c.advice and c.status != OK:
        lines += textwrap.wrap(c.advice, 100, initial_indent=" " * 35, subsequent_indent=" " * 35)  # under the detail
    return "\n".join(lines)


def summary(checks: list[Check]) -> str:
    bad = [c for c in checks if c.status == FAIL]
    warn = [c for c in checks if c.status == WARN]
    if bad:
        return f"{len(bad)} problem(s) to fix before the course runs: {', '.join(c.name for c in bad)}."
    if warn:
        return f"Ready, with {len(warn)} warning(s): {', '.join(c.name for c in warn)}."
    return "Ready."


def format_checks(checks: list[Check]) -> str:
    return "\n".join([HEADER, "", *map(format_check, checks), "", summary(checks)])


def _cmd(args) -> int:
    print(HEADER, end="\n\n", flush=True)
    checks = []
    hub = getattr(args, "hub", False) or None  # None: where a hub is detected
    for c in iter_checks(smoke=not args.quick, jupyter=not args.quick, hub=hub):  # each line as soon as it is known
        checks.append(c)
        print(format_check(c), flush=True)
    print(f"\n{summary(checks)}")
    return 1 if any(c.status == FAIL for c in checks) else 0


def add_parser(sub) -> None:
    """Register ``attnlab doctor`` on the CLI's subparsers."""
    from ..grading.host.options import plain_text

    p = sub.add_parser("doctor", help="check this environment: GPU or interpreter, versions, lab extensions",
                       description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="skip the Triton kernel run and the Jupyter extension listing")
    p.add_argument("--hub", action="store_true", help="check the JupyterHub set-up (nbgrader's exchange folder, its "
                   "permissions, the extensions that use it) even where no hub is detected")
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnlab")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["doctor", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)
