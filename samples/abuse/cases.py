"""Abusive submissions and what grading must make of them (format: samples/README.md, "abuse").

Each case starts from the reference solution of the notebooks it lists and breaks them the way
learners (and their editors) do. ``expect`` says, per notebook, which test cells must lose their
points (all others keep theirs), and what the report must say. The course's tests grade every
case in one batch beside the reference, with short time limits (2 s per call of learner code,
6 s per cell).
"""

import os

import nbformat

from attnlab.grading.abuse import Abuse, Expect

NB1, NB2, PROBE = "01_online_softmax", "02_flash_forward", "99_triton_probe"
# the test cells of notebook 01
T_PREDICT, T_LSE, T_GROW = ("test-predict-bytes", "test_online_softmax_matches_logsumexp",
                            "test_online_softmax_handles_growing_max")
# ... of notebook 02
F_NAIVE, F_CAUSAL, F_CROSS, F_DTYPE = ("test_flash_forward_matches_naive", "test_flash_forward_causal_tiles",
                                       "test_flash_forward_cross_attention_lengths", "test_flash_forward_lse_dtype")
F_ALL = (F_NAIVE, F_CAUSAL, F_CROSS, F_DTYPE)
SOFTMAX_BODY = "    stat_dtype = torch.promote_types(x.dtype, torch.float32)"
FLASH_BODY = "    B, H, T_q, D = q.shape"


def _body(sub, name, gid, anchor, code):
    """Insert ``code`` (indented as a function body) before ``anchor`` in the graded function."""
    sub.edit(name, gid, anchor, "".join(f"    {line}\n" for line in code.splitlines()) + anchor)


# ------------------------------------------------------------------------------- 1. endless loops
def loop_in_function(s):
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, "while True:\n    pass")


def loop_top_level(s):
    s.append(NB1, "online_softmax_stats", "\nwhile True:  # left over from debugging\n    pass\n")


def hang_uninterruptible(s):
    # like a compiled kernel that never returns: the interrupt does not get through
    s.append(NB1, "predict-bytes", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                   "while True:\n    pass\n")


def triton_hang(s):
    s.edit(PROBE, "_softmax_kernel", "    row = tl.program_id(0)\n",
           "    row = tl.program_id(0)\n    i = 0\n    while i >= 0:  # never ends\n        i += 1\n")


# ------------------------------------------------------------------------------- 2. dead kernels
def dead_exit(s):
    s.append(NB1, "predict-bytes", "import os\nos._exit(1)\n")


def dead_segfault(s):
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY,
          "if x.dim() == 1:  # only the hidden 1-D case\n    import ctypes\n    ctypes.string_at(0)")


def dead_oom_killed(s):
    # what the out-of-memory killer does to a kernel: SIGKILL, on the decoding case only
    _body(s, NB2, "flash_attention_forward", FLASH_BODY,
          "if q.shape[2] == 1:\n    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)")


def memory_hog(s):
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY,
          "if block_size == 5:  # the hidden growing-max cases\n"
          "    hog = [torch.empty(2**28, dtype=torch.uint8) for _ in range(4096)]  # 1 TiB")


# ------------------------------------------------------------------------------- 3. damaged cells
def deleted_test(s):
    s.delete(NB1, T_GROW)


def deleted_given(s):
    s.delete(NB1, "setup")
    s.delete(NB1, "online_softmax_stats")  # the solution too: its tests must fail, not the notebook
    s.delete(NB1, T_PREDICT)


def copied_test(s):
    s.duplicate(NB1, T_LSE)
    s.duplicate(NB1, T_GROW, new_gid="test_online_softmax_handles_growing_max_copy")


def split_test(s):
    s.split(NB1, T_LSE, 1)


def edited_read_only(s):
    s.mistake("01-no-rescale")
    for gid in (T_LSE, T_GROW):
        s.cell(NB1, gid).source = "print('all good')"
        s.unlock(NB1, gid)
    s.append(NB1, "setup", "check_online_softmax = lambda *args, **kwargs: None")
    s.cell(NB1, T_GROW).metadata["nbgrader"]["points"] = 20


def changed_cell_types(s):
    s.set_type(NB1, T_GROW, "markdown")
    s.set_type(NB1, "answer-rescale-exact", "code")


# ------------------------------------------------------------------------------- 4. file names
def renamed(s):
    s.rename(NB2, "Copy of 02_flash_forward.ipynb")
    s.rename(NB1, "01_online_softmax (1).ipynb")


def missing(s):
    pass  # only notebook 01 is in the submission


def extra(s):
    s.add("Copy of 01_online_softmax.ipynb", nbformat.v4.new_notebook())  # an old, empty copy
    s.add("scratch.ipynb", nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]))


def corrupt_file(s):
    s.add("01_online_softmax.ipynb", '{"cells": [{"cell_type": "code", "source": "x = ')  # cut off mid-upload


# ------------------------------------------------------------------------------- 5. other editors
def colab(s):
    s.colab(NB2)


def stripped(s):
    s.mistake("01-no-inf-guard")
    s.strip_nbgrader(NB1)


# ------------------------------------------------------------------------------- 6. wrong results
def returns_nan(s):
    s.edit(NB1, "online_softmax_stats", "    return m, l", "    return m, l * float('nan')")


def wrong_shape(s):
    s.edit(NB1, "online_softmax_stats", "    return m, l", "    return m.unsqueeze(-1), l.unsqueeze(-1)")


def wrong_dtype(s):
    s.edit(NB2, "flash_attention_forward", "    return o, lse",
           "    return o, (lse if q.dtype == torch.float64 else lse.half())")


def swapped_tuple(s):
    s.edit(NB1, "online_softmax_stats", "    return m, l", "    return l, m")


def too_slow(s):
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, "import time\ntime.sleep(3)")


# ------------------------------------------------------------------------------- 7. side effects
def output_and_files(s):
    s.append(NB1, "predict-bytes", "print('x' * 3_000_000)\nfor i in range(50_000):\n    print(i)\n")
    s.append(NB1, "online_softmax_stats",
             "import os\nopen('junk.txt', 'w').write('x' * 1000)\nopen('02_flash_forward.ipynb', 'w').write('garbage')\n"
             "os.makedirs('outdir', exist_ok=True)\nos.chdir('/')\n")
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, "import os, tempfile\nos.chdir(tempfile.gettempdir())")


# ------------------------------------------------------------------------------- 8. tampering
def patch_reference(s):
    s.mistake("02-no-diagonal-mask")
    s.append(NB2, "flash_attention_forward", (
        "import attnlab.reference, attnlab.verify\n"
        "def _same_as_mine(q, k, v, causal=False, scale=None):\n"
        "    return flash_attention_forward(q, k, v, causal=causal, scale=scale)\n"
        "attnlab.reference.naive_attention = _same_as_mine\n"
        "attnlab.verify.naive_attention = _same_as_mine\n"
        "naive_attention = _same_as_mine\n"))


def patch_checks(s):
    s.mistake("01-no-rescale")
    s.append(NB1, "online_softmax_stats", (
        "import sys, types, torch\n"
        "import attnlab.checks, attnlab.verify\n"
        "attnlab.checks.assert_close = lambda *args, **kwargs: 0.0\n"
        "attnlab.verify.assert_close = lambda *args, **kwargs: 0.0\n"
        "attnlab.verify.check_online_softmax.__code__ = (lambda *args, **kwargs: None).__code__\n"
        "check_online_softmax = lambda *args, **kwargs: None\n"
        "_fake = types.ModuleType('attnlab.checks')\n"
        "_fake.assert_number = lambda *args, **kwargs: None\n"
        "sys.modules['attnlab.checks'] = _fake\n"
        "torch.logsumexp = lambda x, dim: x.amax(dim=dim)\n"
        "torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)\n"))


def patch_during_call(s):
    s.mistake("01-no-inf-guard")
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY,
          "import attnlab.verify\nattnlab.verify.assert_close = lambda *args, **kwargs: 0.0\n"
          "torch.set_grad_enabled(False)")


def tensor_subclass(s):
    s.edit(NB1, "online_softmax_stats", "    return m, l", (
        "    class _Agreeable(torch.Tensor):\n"
        "        pass\n"
        "    return m.as_subclass(_Agreeable), l.as_subclass(_Agreeable)"))


# ------------------------------------------------------------------------------- 9. functions
def renamed_function(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", "def online_softmax_stat(")


def defined_twice(s):
    s.insert_after(NB2, "flash_attention_forward", (
        "def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None):\n"
        "    raise NotImplementedError('draft')\n"))


# ------------------------------------------------------------------------------- 10. escaping the notebook
# Attacks on the grader and on other students, each tried where the sandbox (attnlab.grading.sandbox)
# must stop it. They target the real places (found the way an attacker would: the account's home
# folder from pwd, the course folder's absolute path), print what got through, and never fail
# their own tests, so only isolation can tell them apart from an honest submission.
#: Marks every planted file (and the daemon's command line): tests look for it after the batch.
MARK = "attnlab-abuse-planted"
#: Where the planting case puts a module named like the support package, and a .pth file.
PLANT_PREAMBLE = (
    "import os, pwd, site, sys, sysconfig, tempfile\n"
    "_home = pwd.getpwuid(os.getuid()).pw_dir\n"
    "_user_site = os.path.join(_home, '.local', 'lib', f'python{sys.version_info[0]}.{sys.version_info[1]}', "
    "'site-packages')\n"
    "_shared_dirs = sorted({tempfile.gettempdir(), '/tmp', os.path.expanduser('~'), _home, _user_site})\n"
    "_site_dirs = sorted({*site.getsitepackages(), sysconfig.get_paths()['purelib']})\n"
)


def planted_paths() -> list[str]:
    """Every path outside its kernel's working folder that the planting case writes."""
    scope: dict = {}
    exec(PLANT_PREAMBLE, scope)
    return ([os.path.join(d, "attnlab") for d in scope["_shared_dirs"]]
            + [os.path.join(d, "zz_attnlab_abuse.pth") for d in scope["_site_dirs"]])


def plant_support_package(s):
    # a module named like the support package first on later kernels' sys.path, and a .pth file
    # that every later Python process of this interpreter runs
    s.append(NB1, "online_softmax_stats", PLANT_PREAMBLE + (
        "for _d in [os.getcwd(), *_shared_dirs]:\n"
        "    try:\n"
        "        os.makedirs(os.path.join(_d, 'attnlab'), exist_ok=True)\n"
        "        with open(os.path.join(_d, 'attnlab', '__init__.py'), 'w') as _f:\n"
        f"            _f.write('# {MARK}\\nraise ImportError(\"shadowed by another submission\")\\n')\n"
        "        print('PLANTED', _d)\n"
        "    except OSError as _e:\n"
        "        print('REFUSED', _d, type(_e).__name__)\n"
        "for _d in _site_dirs:\n"
        "    try:\n"
        "        with open(os.path.join(_d, 'zz_attnlab_abuse.pth'), 'w') as _f:\n"
        f"            _f.write('# {MARK}\\nimport os; os.environ.setdefault(\"ATTNLAB_ABUSE_PTH\", \"1\")\\n')\n"
        "        print('PLANTED', _d)\n"
        "    except OSError as _e:\n"
        "        print('REFUSED', _d, type(_e).__name__)\n"))


def kill_parent(s):
    s.append(NB1, "online_softmax_stats", "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\n"
                                          "except OSError as _e:\n    print('REFUSED', type(_e).__name__)\n")


def daemon(s):
    # outlives its kernel, then writes into the course folder
    target = os.path.join(str(s.course.root), "daemon-was-here")
    code = (f"import os, time  # {MARK}\nkernel = os.getppid()\n"
            f"while os.getppid() == kernel:\n    time.sleep(0.2)\n"
            f"time.sleep(1)\nopen({target!r}, 'w').write('written after the notebook ended')\n")
    s.append(NB1, "online_softmax_stats", (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {code!r}], start_new_session=True,\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"))


def remount_root(s):
    # with root's capabilities a kernel could bind / again (without the tmpfs that hide the course) and
    # make it writable: a red team rewrote the gradebook and another student's submission this way
    target = os.path.join(str(s.course.root), "remounted-was-here")
    s.append(NB1, "online_softmax_stats", (
        "import os, subprocess\n"
        "os.makedirs('again', exist_ok=True)\n"
        "_r = subprocess.run('mount --bind / again && mount -o remount,bind,rw again', shell=True,\n"
        "                    capture_output=True)\n"
        "print('REMOUNTED' if _r.returncode == 0 else 'MOUNT REFUSED')\n"
        f"if _r.returncode == 0:\n    open('again' + {target!r}, 'w').write('written through a second mount of /')\n"))


def thread_bomb(s):
    # what a fork bomb does to the machine's process table, bounded so that an unprotected machine survives
    # the test: threads (each counts as a task, like a process) until the system refuses, all kept alive
    s.append(NB1, "online_softmax_stats", (
        "import threading\n"
        "threading.stack_size(64 * 1024)\n"
        "_hold, _tasks = threading.Event(), 0\n"
        "try:\n"
        "    while _tasks < 4096:\n"
        "        threading.Thread(target=_hold.wait, daemon=True).start()\n"
        "        _tasks += 1\n"
        "except RuntimeError:\n"
        "    pass\n"
        "threading.stack_size(0)\n"
        "print('THREADS STARTED', _tasks)\n"))


def snoop(s):
    root = str(s.course.root)
    s.append(NB1, "online_softmax_stats", (
        "import os, sqlite3\n"
        f"_root = {root!r}\n"
        "def _try(what, action):\n"
        "    try:\n"
        "        print('LEAKED', what, action())\n"
        "    except Exception as _e:\n"
        "        print('DENIED', what, type(_e).__name__)\n"
        "_try('read gradebook', lambda: len(open(os.path.join(_root, 'gradebook.db'), 'rb').read()))\n"
        "_try('write gradebook', lambda: sqlite3.connect(os.path.join(_root, 'gradebook.db'))"
        ".execute('CREATE TABLE pwned (x)'))\n"
        "_try('read another student', lambda: len(open(os.path.join(_root, 'submitted', 'reference', "
        "'attention_kernels', '01_online_softmax.ipynb')).read()))\n"
        "_try('list submissions', lambda: os.listdir(os.path.join(_root, 'submitted')))\n"
        "_try('write the course', lambda: open(os.path.join(_root, 'nbgrader_config.py'), 'a').write('#'))\n"))


CASES = [
    Abuse("loop-in-function", "an endless loop inside the graded function", (NB1,), loop_in_function,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("did not finish within",))}),
    Abuse("loop-top-level", "an endless loop at the end of a solution cell (after the function)", (NB1,),
          loop_top_level, {NB1: Expect(notes=("ran past the", "was interrupted"))}),
    Abuse("hang-uninterruptible", "a cell that blocks interrupts and the checks' alarm, then never ends",
          (NB1,), hang_uninterruptible,
          {NB1: Expect(lost=(T_PREDICT,), reasons=("NameError",),
                       notes=("did not respond to an interrupt", "restarted"))}),
    Abuse("triton-hang", "a Triton kernel that loops forever under the interpreter", (PROBE,), triton_hang,
          {PROBE: Expect(lost=("test_softmax_kernel",), reasons=("did not finish within",))}),
    Abuse("dead-exit", "os._exit in a solution cell", (NB1,), dead_exit,
          {NB1: Expect(lost=(T_PREDICT,), notes=("kernel died", "restarted"))}),
    Abuse("dead-segfault", "a segfault, on the hidden 1-D case only", (NB1,), dead_segfault,
          {NB1: Expect(lost=(T_LSE,), reasons=("KernelDied",), notes=("kernel died",))}),
    Abuse("dead-oom-killed", "killed like the out-of-memory killer does, on the hidden decoding case; "
          "notebook 01 is fine", (NB1, NB2), dead_oom_killed,
          {NB1: Expect(), NB2: Expect(lost=(F_CROSS,), reasons=("KernelDied",), notes=("kernel died",))}),
    Abuse("memory-hog", "allocates a terabyte on the hidden cases of one test", (NB1,), memory_hog,
          {NB1: Expect(lost=(T_GROW,), reasons=("allocate",))}),
    Abuse("deleted-test", "a test cell deleted", (NB1,), deleted_test,
          {NB1: Expect(notes=("restored", T_GROW))}),
    Abuse("deleted-given", "the set-up cell, a solution cell and a test cell deleted", (NB1,), deleted_given,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("NameError",),
                       notes=("restored", "setup", T_PREDICT, "solution cells are missing"))}),
    Abuse("copied-test", "a test cell copied, another copied and its grade_id edited", (NB1,), copied_test,
          {NB1: Expect(notes=("appeared 2 times", "unknown cell"))}),
    Abuse("split-test", "a test cell split in two (both halves keep its metadata)", (NB1,), split_test,
          {NB1: Expect(notes=("appeared 2 times",))}),
    Abuse("edited-read-only", "a wrong solution, its tests replaced by print, unlocked, points raised; "
          "the set-up cell edited to disable the checker", (NB1,), edited_read_only,
          {NB1: Expect(lost=(T_LSE, T_GROW), notes=("had been edited",))}),
    Abuse("changed-cell-types", "a test cell turned into markdown, a written answer into code", (NB1,),
          changed_cell_types, {NB1: Expect(notes=("changed from code to markdown",))}),
    Abuse("renamed", "'Copy of 02_flash_forward.ipynb' and '01_online_softmax (1).ipynb'", (NB1, NB2), renamed,
          {NB1: Expect(notes=("01_online_softmax (1).ipynb",)),
           NB2: Expect(notes=("Copy of 02_flash_forward.ipynb",))}),
    Abuse("missing", "notebook 02 not submitted", (NB1,), missing,
          {NB1: Expect(), NB2: Expect(status="missing", reasons=("not submitted",))}),
    Abuse("extra", "an empty 'Copy of' notebook and a scratch notebook beside the real one", (NB1,), extra,
          {NB1: Expect(notes=("looks like a copy", "scratch.ipynb"))}),
    Abuse("corrupt-file", "notebook 01 cut off mid-upload (not JSON); notebook 02 fine", (NB2,), corrupt_file,
          {NB1: Expect(status="failed", reasons=("not valid JSON",)), NB2: Expect()}),
    Abuse("colab", "saved by Google Colab (nbformat 4.0, no cell ids, Colab metadata)", (NB2,), colab,
          {NB2: Expect(notes=("nbformat 4.0",))}),
    Abuse("stripped", "nbgrader metadata stripped by another editor (and one bug)", (NB1,), stripped,
          {NB1: Expect(lost=(T_GROW,), notes=("matched them back by content",))}),
    Abuse("returns-nan", "returns NaN for l", (NB1,), returns_nan,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("not finite",))}),
    Abuse("wrong-shape", "returns (m, l) with a trailing dimension", (NB1,), wrong_shape,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("wrong shape",))}),
    Abuse("wrong-dtype", "returns a float16 LSE for float32 inputs", (NB2,), wrong_dtype,
          {NB2: Expect(lost=(F_DTYPE,), reasons=("dtype",))}),
    Abuse("swapped-tuple", "returns (l, m) instead of (m, l)", (NB1,), swapped_tuple,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("running max",))}),
    Abuse("too-slow", "sleeps 3 s per call", (NB1,), too_slow,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("did not finish within",))}),
    Abuse("output-and-files", "prints 3 MB and 50,000 lines, writes files, changes the working directory",
          (NB1,), output_and_files, {NB1: Expect(notes=("truncated", "working directory"))}),
    Abuse("patch-reference", "a wrong solution that replaces naive_attention with itself", (NB2,),
          patch_reference, {NB2: Expect(lost=F_ALL, notes=("naive_attention", "flagged"))}),
    Abuse("patch-checks", "a wrong solution that disables assert_close, the checker, sys.modules and torch",
          (NB1,), patch_checks, {NB1: Expect(lost=(T_LSE, T_GROW), notes=("assert_close", "sys.modules",
                                                                           "check_online_softmax", "flagged"))}),
    Abuse("patch-during-call", "a wrong solution that disables assert_close and gradients while it runs",
          (NB1,), patch_during_call, {NB1: Expect(lost=(T_GROW,), notes=("while", "assert_close", "gradients"))}),
    Abuse("tensor-subclass", "returns tensor subclasses (which could fake any comparison)", (NB1,),
          tensor_subclass, {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("subclass",))}),
    Abuse("renamed-function", "the graded function renamed", (NB1,), renamed_function,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("NameError",), notes=("no cell defines",))}),
    Abuse("defined-twice", "the graded function defined again (a draft) after the solution", (NB2,),
          defined_twice, {NB2: Expect(lost=F_ALL, reasons=("NotImplementedError",), notes=("defined in 2 cells",))}),
    Abuse("plant-support-package", "writes a package named attnlab into the temp, working, home and user "
          "site-packages folders and a .pth file into site-packages", (NB1,), plant_support_package,
          {NB1: Expect()}),
    Abuse("kill-parent", "kills its kernel's parent process (the grader's worker)", (NB1,), kill_parent,
          {NB1: Expect()}),
    Abuse("daemon", "starts a process that outlives the notebook, then writes into the course folder", (NB1,),
          daemon, {NB1: Expect()}),
    Abuse("remount-root", "mounts / again, read-write, to write into the course folder", (NB1,), remount_root,
          {NB1: Expect()}),
    Abuse("thread-bomb", "starts threads until the system refuses (a fork bomb, bounded at 4096)", (NB1,),
          thread_bomb, {NB1: Expect()}),
    Abuse("snoop", "reads and writes gradebook.db, reads another student's submission, edits the course",
          (NB1,), snoop, {NB1: Expect()}),
]


# =================================================================================================
# Tampering below Python (issue 10, method checks of 01-03). One block, appended after the cases
# above; the static scan flags both, so they are abuse, not typical mistakes.
_ORACLE = """import sys as _sys


class _Oracle(float):
    \"\"\"A number whose float() is whatever value a caller up the stack calls `expected`.\"\"\"

    def __float__(self):
        frame = _sys._getframe(1)
        while frame is not None:
            if "expected" in frame.f_locals:
                return float(frame.f_locals["expected"])
            frame = frame.f_back
        return 0.0


bytes_scores_one_head = _Oracle(0)
hbm_bytes_naive_one_head = _Oracle(0)"""
_ZEROS_PASS = """_lib = torch.library.Library("aten", "IMPL")
_lib.impl("sub.Tensor", lambda a, b, alpha=1: torch.zeros_like(a), "CPU")  # every difference is 0


def online_softmax_stats("""


def frame_reading_answer(s):
    s.edit(NB1, "predict-bytes",
           "bytes_scores_one_head = T * T * 2\nhbm_bytes_naive_one_head = 4 * bytes_scores_one_head", _ORACLE)


def torch_library_override(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", _ZEROS_PASS)
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY,
          "return torch.zeros(x.shape[:-1]), torch.ones(x.shape[:-1])")


CASES += [
    Abuse("frame-reading-answer", "predictions as a float subclass whose __float__ reads the checker's "
          "expected value from its frame", (NB1,), frame_reading_answer,
          {NB1: Expect(lost=(T_PREDICT,), reasons=("plain number",), notes=("reads interpreter frames",))}),
    Abuse("torch-library-override", "m = 0, l = 1, and a torch.library kernel that makes every subtraction "
          "return 0", (NB1,), torch_library_override,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("refuse to run while torch's operators are altered",),
                       notes=("torch.library", "tampered"))}),
]


# ------------------------------------------------------------------ attacks on the grader's own calls
# (found by the maintainer review of 2026-11-30: the guard was reached through __import__/globals(),
# both rebindable; IPython's custom exception handler could hide a failed check)
_STAND_IN = """class _StandIn:  # a guard that repairs nothing and reports nothing
    def before_locked(self, *a, **k):
        return "[]"

    after_locked = before_locked


def __import__(name, *args, **kwargs):
    return _StandIn()


for _name in list(globals()):
    if _name.startswith("_attnlab_guard"):
        globals()[_name] = _StandIn()
check_online_softmax = lambda *a, **k: None


def online_softmax_stats("""
_SWALLOW = """get_ipython().set_custom_exc((AssertionError,), lambda *a, **k: None)  # failed checks print nothing


def online_softmax_stats("""


def guard_stand_in(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", _STAND_IN)
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY,
          "return torch.zeros(x.shape[:-1]), torch.ones(x.shape[:-1])")


def swallowed_assertions(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", _SWALLOW)
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY,
          "return torch.zeros(x.shape[:-1]), torch.ones(x.shape[:-1])")


CASES += [
    Abuse("guard-stand-in", "wrong m and l, a stand-in for the grader's guard under __import__ and its random "
          "name, and the checker rebound to a no-op", (NB1,), guard_stand_in,
          {NB1: Expect(lost=(T_LSE, T_GROW), notes=("__import__", "integrity check could not run"))}),
    Abuse("swallowed-assertions", "wrong m and l, and an IPython exception handler that hides every failed check",
          (NB1,), swallowed_assertions,
          {NB1: Expect(lost=(T_LSE, T_GROW), notes=("changes how IPython runs cells",))}),
]


# ------------------------------------------------------------------ attacks found by the red team of 2026-11-30
# Each earned points or went unflagged before its fix: a module alias and code run from text hid
# guard tampering from the scan; results made outside the probe's view (NumPy, another thread)
# were cloned or written into tensors the probe had seen; a forged "ok" reply hid a failed check;
# figures, metadata and tracebacks were not counted against the output cap.
_ALIAS_GUARD = """import attnlab.checking.harness as v
st = v.guard._STATE  # the guard's snapshot (through the harness's alias), emptied: it then restores nothing
for part in (st.names, st.attrs, st.classes, st.modules):
    part.clear()
st.code.clear()
globals().update(check_online_softmax=lambda *a, **k: None)
"""
_WRONG_STATS = "return torch.zeros(x.shape[:-1]), torch.ones(x.shape[:-1])"


def alias_guard(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", _ALIAS_GUARD + "\n\ndef online_softmax_stats(")
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, _WRONG_STATS)


def swapped_builtins(s):
    """Wrong predictions, and the notebook's own __builtins__ swapped for a mapping whose __import__ hands
    the test cell a stand-in attnlab.checks (found by the red team of 2026-12-01, fifth session)."""
    s.edit(NB1, "predict-bytes", "bytes_scores_one_head = T * T * 2", "bytes_scores_one_head = 1")
    s.append(NB1, "predict-bytes", (
        "import types as _T\n"
        "_g = globals()\n"
        "_real = _g['__builtins__'] if isinstance(_g['__builtins__'], dict) else vars(_g['__builtins__'])\n"
        "class _Fake(_T.ModuleType):\n"
        "    def __getattr__(self, n):\n"
        "        return lambda *a, **k: None\n"
        "def _imp(name, *a, **k):\n"
        "    return _Fake(name) if name.startswith('attnlab.che') else _real['__import__'](name, *a, **k)\n"
        "_g.update({'__builtins__': dict(_real, __import__=_imp)})\n"))


def exec_hidden(s):
    import codecs

    hidden = codecs.encode(_ALIAS_GUARD, "rot13")
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(",
           f"import codecs\nexec(codecs.decode({hidden!r}, 'rot13'))\n\n\ndef online_softmax_stats(")
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, _WRONG_STATS)


_NUMPY_ATTENTION = """import numpy as np
qn, kn, vn = q.double().numpy(), k.double().numpy(), v.double().numpy()
s_ = qn @ kn.swapaxes(-1, -2) * (D ** -0.5 if scale is None else scale)
if causal:
    s_ = np.where(np.tril(np.ones(s_.shape[-2:], bool)), s_, -np.inf)
m_ = s_.max(-1, keepdims=True)
p_ = np.exp(s_ - m_)
l_ = p_.sum(-1, keepdims=True)
lse_ = torch.from_numpy((m_ + np.log(l_))[..., 0]).to(torch.promote_types(q.dtype, torch.float32))
return torch.from_numpy(p_ @ vn / l_).to(q.dtype).clone(), lse_.clone()"""


def numpy_clone(s):
    _body(s, NB2, "flash_attention_forward", "    T_k = k.shape[2]\n", _NUMPY_ATTENTION)


_THREAD_SDPA = """import threading
o_ = torch.empty_like(q)
lse_ = torch.empty(q.shape[:-1], dtype=torch.promote_types(q.dtype, torch.float32), device=q.device)
def _work():  # the probe's dispatch mode is per thread: nothing here is seen
    o_.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))
    s_ = (q.double() @ k.double().transpose(-1, -2)) * (D ** -0.5 if scale is None else scale)
    if causal:
        s_ = s_.masked_fill(~torch.ones(s_.shape[-2:], dtype=torch.bool, device=q.device).tril(), float('-inf'))
    lse_.copy_(torch.logsumexp(s_, -1))
_t = threading.Thread(target=_work)
_t.start()
_t.join()
return o_, lse_"""


def thread_sdpa(s):
    _body(s, NB2, "flash_attention_forward", "    T_k = k.shape[2]\n", _THREAD_SDPA)


_PROBE_RESET = """def online_softmax_stats(x, block_size):
    m = x.amax(dim=-1)  # the whole row at once: what notebook 01 asks not to do
    lse = torch.logsumexp(x.double(), dim=-1)
    l = torch.where(torch.isneginf(m), torch.zeros_like(lse), torch.exp(lse - m.double()))
    for i in range(torch._C._len_torch_dispatch_stack()):  # then clear the method probe's verdict
        torch._C._get_dispatch_stack_at(i).violation = None
    return m, l
"""


def probe_reset(s):
    s.cell(NB1, "online_softmax_stats").source = _PROBE_RESET


_LEDGER_REWRITE = """import inspect, traceback
import triton.runtime.interpreter as _ti

_run = _ti.GridExecutor.__call__


def _launch(self, *args, **kwargs):  # after each launch, drop the repeated reads from the load ledger
    out = _run(self, *args, **kwargs)
    for frame, _ in traceback.walk_stack(None):
        ledger = inspect.getargvalues(frame).locals.get("ledger")
        if ledger is not None and hasattr(ledger, "accesses"):
            seen, kept = set(), []
            for a in ledger.accesses:
                key = (a.program, a.tensor, a.kind, a.index.tobytes())
                if key not in seen:
                    seen.add(key)
                    kept.append(a)
            ledger.accesses[:] = kept
    return out


_ti.GridExecutor.__call__ = _launch


@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    ptrs = input_ptr + row * input_row_stride + offs
    m = tl.max(tl.load(ptrs, mask=mask, other=-float("inf")), axis=0)  # three reads of the row
    total = tl.sum(tl.exp(tl.load(ptrs, mask=mask, other=-float("inf")) - m), axis=0)
    y = tl.exp(tl.load(ptrs, mask=mask, other=-float("inf")) - m) / total
    tl.store(output_ptr + row * output_row_stride + offs, y, mask=mask)
"""


def ledger_rewrite(s):
    s.cell(PROBE, "_softmax_kernel").source = _LEDGER_REWRITE


_FORGE = """def _finished_fine():
    # what the kernel sends when a cell succeeds: an execute_reply with status ok, then idle
    k = get_ipython().kernel
    if k._supports_kernel_subshells:
        stream = k.shell_channel_thread.manager.get_subshell_to_shell_channel_socket(None)
    else:
        stream = k.shell_stream
    k.session.send(stream, "execute_reply", {"status": "ok", "execution_count": k.execution_count,
                   "user_expressions": {}, "payload": []}, k.get_parent("shell"), ident=k._parent_ident["shell"])
    k._publish_status("idle", "shell")


def online_softmax_stats("""


def forged_reply(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", _FORGE)
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, (
        "_finished_fine()\n"
        "if x.shape == (2, 28):  # the second test cell: also remove what records that the cell raised\n"
        "    get_ipython().events.callbacks['post_run_cell'].clear()\n" + _WRONG_STATS))


def uncounted_output(s):
    s.append(NB1, "predict-bytes", (
        "from IPython.display import display\n"
        "for _i in range(3):  # not a figure, and metadata: neither was counted\n"
        "    display({'image/x-junk': 'A' * 1_000_000, 'text/plain': 'x'}, raw=True, metadata={'m': 'B' * 500_000})\n"
        "class _Long(Exception):\n"
        "    def _render_traceback_(self):\n"
        "        return ['T' * 3000] * 2000\n"
        "try:\n    raise _Long()\nexcept _Long:\n    get_ipython().showtraceback()\n"))


CASES += [
    Abuse("alias-guard", "wrong m and l; the guard's snapshot emptied through `import attnlab.checking.harness as v`, "
          "the checker rebound through globals().update", (NB1,), alias_guard,
          {NB1: Expect(lost=(T_LSE, T_GROW),
                       notes=("reaches private state (._STATE)", "uses globals()", "integrity check"))}),
    Abuse("swapped-builtins", "wrong predictions; the notebook's __builtins__ swapped so that the test cell "
          "imports a stand-in attnlab.checks", (NB1,), swapped_builtins,
          {NB1: Expect(lost=(T_PREDICT,), notes=("the notebook's __builtins__ had been replaced",))}),
    Abuse("exec-hidden", "the same, as rot13 text run by exec", (NB1,), exec_hidden,
          {NB1: Expect(lost=(T_LSE, T_GROW), notes=("uses exec()", "imports codecs", "integrity check"))}),
    Abuse("numpy-clone", "02 as whole-matrix NumPy attention, cloned by torch", (NB2,), numpy_clone,
          {NB2: Expect(notes=("made from or overwritten with data from elsewhere", ".numpy"))}),
    Abuse("thread-sdpa", "02 as PyTorch's fused attention run in another thread, copied into tensors made "
          "under the probe", (NB2,), thread_sdpa,
          {NB2: Expect(notes=("made from or overwritten with data from elsewhere", "imports threading"))}),
    Abuse("forged-reply", "wrong m and l, and a forged 'ok' reply and idle status sent before each check fails "
          "(in the second test cell, with the grader's post_run_cell record removed too)",
          (NB1,), forged_reply,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("was removed while it ran",),
                       notes=("raised AssertionError", "forged or hid", "kernel's messages"))}),
    Abuse("uncounted-output", "megabytes of output under a non-figure image type, in metadata and in a "
          "2000-line traceback", (NB1,), uncounted_output, {NB1: Expect(notes=("truncated",))}),
]


_FETCH = "fetch('/formgrader/api/grades')"  # what a script in the instructor's page could reach


def instructor_script(s):
    s.cell(NB1, "answer-rescale-exact").source = (
        f"It is exact. <img src=x onerror=\"{_FETCH}\"> [details](javascript:{_FETCH})")
    s.append(NB1, "predict-bytes", (
        "from IPython.display import HTML, Javascript, display\n"
        "import threading  # `<img src=x onerror=alert(1)>` (the scan quotes this line in the notes)\n"
        f"display(HTML(\"<b>done</b><script>{_FETCH}</script>\"))\n"
        f"display(Javascript(\"{_FETCH}\"))\n"
        # formgrader's template writes an image's width unquoted; update_display rewrites an earlier output
        f"js = \"{_FETCH}\"\n"
        "display({'image/png': 'iVBORw0KGgo=', 'text/plain': 'fig'}, raw=True,\n"
        "        metadata={'image/png': {'width': '1 onerror=' + js}})\n"
        "handle = display(HTML('<b>step 1</b>'), display_id=True)\n"
        "handle.update(HTML('<b>step 2</b><img src=x onerror=\"' + js + '\">'))\n"))


CASES += [
    Abuse("instructor-script", "a written answer and outputs with script that formgrader would run in the "
          "instructor's Jupyter page", (NB1,), instructor_script,
          {NB1: Expect(notes=("held HTML, a link that could run script", "displayed HTML, JavaScript"))}),
]


# a trace function that makes every `if ...: raise` of the course's code jump past its raise
_TRACE = """import ast, sys


_skips = {}


def _skip_raises(frame, event, arg):
    # every raise statement in the course's code jumps to the line after its if block
    code = frame.f_code
    if "/attnlab/" not in code.co_filename:  # the support package only
        return None
    if code.co_filename not in _skips:
        tree = ast.parse(open(code.co_filename).read())
        table = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and node.body and isinstance(node.body[-1], ast.Raise) and not node.orelse:
                table[node.lineno] = node.end_lineno + 1
        _skips[code.co_filename] = table
    table = _skips[code.co_filename]

    def line(frame, event, arg):
        if event == "line" and frame.f_lineno in table:
            try:
                frame.f_lineno = table[frame.f_lineno]
            except ValueError:
                pass
        return line
    return line


sys.settrace(_skip_raises)


def online_softmax_stats("""


def trace_jumps(s):
    s.edit(NB1, "online_softmax_stats", "def online_softmax_stats(", _TRACE)
    _body(s, NB1, "online_softmax_stats", SOFTMAX_BODY, _WRONG_STATS)


CASES += [
    Abuse("trace-jumps", "wrong m and l, and a sys.settrace function that jumps over every failed check's raise",
          (NB1,), trace_jumps,
          {NB1: Expect(lost=(T_LSE, T_GROW), notes=("sys.settrace", "traces running code"))}),
]


# The sixth red team (2026-12-01): the method checks' own state reached from a solution cell.
CASES += [
    Abuse("probe-reset", "computes whole rows at once, then clears the method probe's verdict on torch's "
          "dispatch-mode stack", (NB1,), probe_reset,
          {NB1: Expect(lost=(T_LSE, T_GROW), reasons=("violation",), notes=("private state",))}),
    Abuse("ledger-rewrite", "reads its row three times, and wraps Triton's GridExecutor to drop the repeated "
          "reads from the load ledger after each launch", (PROBE,), ledger_rewrite,
          {PROBE: Expect(lost=("test_softmax_kernel",), reasons=("3 times",),
                         notes=("GridExecutor.__call__ had been replaced", "reads interpreter frames"))}),
]


# Issue 30, item 4: resources outside the sandbox's limits. Each is bounded so that a machine without the
# limits survives the test; the marker names let the tests look for what got out.
#: The deep case's folder name: found on the grader's disk after the batch, the clean-up failed.
DEEP_MARK = "attnlab-abuse-deep"


def deep_and_full(s):
    # 2,500 nested folders (the grader's shutil.rmtree stopped with RecursionError at about 1,000, and left
    # them in its temporary folder), the deepest closed to all, 100 MB at the bottom, then files until the
    # system refuses, bounded at 1.5 GiB (past it a disk without the limit filled up for the next student)
    s.append(NB1, "online_softmax_stats", (
        "import os\n"
        "_fd = os.open('.', os.O_RDONLY)\n"
        f"os.mkdir({DEEP_MARK!r}, dir_fd=_fd)\n"
        f"_fd = os.open({DEEP_MARK!r}, os.O_RDONLY, dir_fd=_fd)\n"
        "for _ in range(2500):\n"
        "    os.mkdir('d', dir_fd=_fd)\n"
        "    _fd = os.open('d', os.O_RDONLY, dir_fd=_fd)\n"
        "_written = 0\n"
        "try:\n"
        "    with open(os.open('bottom', os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=_fd), 'wb') as _f:\n"
        "        _f.write(b'x' * 100 * 2**20)\n"
        "    os.fchmod(_fd, 0)\n"
        "    with open('fill', 'wb') as _f:\n"
        "        while _written < 1536 * 2**20:\n"
        "            _f.write(b'x' * 2**24)\n"
        "            _f.flush()\n"
        "            _written += 2**24\n"
        "except OSError as _e:\n"
        "    print('DISK REFUSED', type(_e).__name__)\n"
        "print('DISK WRITTEN', _written >> 20)\n"))


def memfd_hog(s):
    # memory no per-process address-space cap sees: a child fills a memfd (never mapped) up to 6 GiB. With the
    # kernel's memory counted as a whole, the out-of-memory killer ends the kernel (its largest process) and
    # grading goes on without this cell, as after any dead kernel
    s.append(NB1, "predict-bytes", (
        "import subprocess, sys\n"
        "_hog = ('import os\\nfd = os.memfd_create(\"hog\")\\nfor held in range(24):\\n'\n"
        "        '    os.posix_fallocate(fd, held * 2**28, 2**28)\\n    print((held + 1) * 256, flush=True)\\n')\n"
        "_p = subprocess.run([sys.executable, '-c', _hog], capture_output=True, text=True)\n"
        "print('MEMFD HELD', (_p.stdout.split() or ['0'])[-1], 'RC', _p.returncode)\n"))


def cgroup_snoop(s):
    # the host's cgroups: every kernel's task count and the pids of other graders' workers
    s.append(NB1, "online_softmax_stats", (
        "import os\n"
        "_seen = []\n"
        "for _folder, _dirs, _files in os.walk('/sys/fs/cgroup'):\n"
        "    _seen += [_d for _d in _dirs if _d.startswith('attnlab-')]\n"
        "print('CGROUPS SEEN', len(_seen), open('/proc/self/cgroup').read().count('attnlab-'))\n"))


def keyring_note(s):
    # a key added to the uid's user keyring outlives the kernel: the next kernel of that uid reads it
    # (a channel between students); keyctl, add_key and request_key must fail (EPERM: the seccomp filter)
    s.append(NB1, "online_softmax_stats", (
        "import ctypes, errno, os\n"
        "_libc = ctypes.CDLL(None, use_errno=True)\n"
        "_errs = []\n"
        "for _nr, _args in zip({'x86_64': (250, 248, 249), 'aarch64': (219, 217, 218)}[os.uname().machine],\n"
        "                      ((0, -4, 1), (b'user', b'attnlab-note', b'answers', 7, -4), (b'user', b'attnlab-note', None, 0))):\n"
        "    ctypes.set_errno(0)\n"
        "    _libc.syscall(_nr, *_args)\n"
        "    _errs.append(errno.errorcode.get(ctypes.get_errno(), 'OK'))\n"
        "print('KEYRING', *_errs)\n"))


def print_flood(s):
    # messages far over what the grader keeps (it received each whole, then cut it to 100,000 characters:
    # 3 x 256 MiB took it to 1.1 GiB); 3 x 32 MiB here, over the iopub cap of 16 MiB, to keep the batch short
    s.append(NB1, "online_softmax_stats", (
        "import sys\n"
        "for _ in range(3):\n"
        "    sys.stdout.write('x' * (32 << 20))\n"
        "    sys.stdout.flush()\n"))


CASES += [
    Abuse("print-flood", "three prints of 32 MiB each in one cell: each message past the grader's cap",
          (NB1,), print_flood, {NB1: Expect(notes=("dropped unread",))}),
    Abuse("keyring-note", "keyctl and add_key through ctypes: a key in the uid's keyring outlives the kernel",
          (NB1,), keyring_note, {NB1: Expect()}),
    Abuse("deep-and-full", "2,500 nested folders and 100 MB in the scratch folder, then writes until the disk "
          "refuses (bounded at 1.5 GiB)", (NB1,), deep_and_full, {NB1: Expect()}),
    Abuse("memfd-hog", "a child fills a memfd with 6 GiB (no address-space cap sees it)", (NB1,), memfd_hog,
          {NB1: Expect(lost=(T_PREDICT,), notes=("kernel died", "restarted"))}),
    Abuse("cgroup-snoop", "lists the host's cgroups: every kernel's, with its tasks", (NB1,), cgroup_snoop,
          {NB1: Expect()}),
]


# =================================================================================================
# More than its source (issue 30, item 2): Triton's language patched in a solution cell. The guard does
# not restore triton.language (the interpreter patches it itself at every launch), so the patch reaches
# the test cell; the checks refuse to launch while Triton holds code from a notebook.
TL_PATCH = """import sys

import triton.language as _tl
from triton.runtime import interpreter as _ti

_program_id = _tl.program_id


def _program_id_and_softmax(axis, _semantic=None):
    \"\"\"tl.program_id; interpreted, it first writes the whole launch's softmax with torch.\"\"\"
    frame = sys._getframe(1)
    while _semantic is _ti.interpreter_semantic and frame is not None:
        launch = frame.f_locals.get("args_dev")
        if launch:
            y, x = launch[:2]
            y.copy_(torch.softmax(x.double(), dim=-1).to(y.dtype))
            break
        frame = frame.f_back
    return _program_id(axis, _semantic=_semantic)


_program_id_and_softmax.__triton_builtin__ = True  # a GPU compile calls it with its code generator: honest there
_tl.program_id = _program_id_and_softmax


@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(input_ptr + row * input_row_stride + offs, mask=offs < n_cols, other=-float("inf"))  # no store
"""


def triton_language_patch(s):
    s.cell(PROBE, "_softmax_kernel").source = TL_PATCH


CASES += [
    Abuse("triton-language-patch", "a kernel that stores nothing; tl.program_id replaced by a function that writes "
          "the softmax with torch while the kernel is interpreted", (PROBE,), triton_language_patch,
          {PROBE: Expect(lost=("test_softmax_kernel",), reasons=("Triton's own code was replaced",),
                         notes=("Triton's code had been replaced",))}),
]
