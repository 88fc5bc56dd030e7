"""Typical mistakes in notebook 04 (format: samples/README.md).

Entries whose ``fails`` is empty are not mistakes: they are correct kernels written differently
from the reference, which must keep every point. The shortcuts at the end give the right numbers
for every tested width without the method the notebook teaches (one program per row, one masked
read of the row in one block); the load accounting under the interpreter takes their points.
"""

from pathlib import Path

from attnlab.grading.samples import Mistake

_NB, _CELL = "04_triton_softmax", "_softmax_kernel"
_ROWS, _LARGE, _STRIDED = ("test_softmax_kernel_rows", "test_softmax_kernel_large_values",
                           "test_softmax_kernel_strided_rows")
_ALL = (_ROWS, _LARGE, _STRIDED)

_REF_SRC = (Path(__file__).resolve().parents[2] / "notebooks" / f"{_NB}.py").read_text()
_ROW_LINE = "    row = tl.program_id(0).to(tl.int64)  # 64-bit, so row * stride cannot overflow\n"
_STORE_LINE = ("    tl.store(output_ptr + row * output_row_stride + cols, y.to(output_ptr.dtype.element_ty), "
               "mask=in_row)\n")
# the reference body after its first line, up to and including the store
_AFTER_ROW = _REF_SRC[_REF_SRC.index(_ROW_LINE) + len(_ROW_LINE):_REF_SRC.index(_STORE_LINE) + len(_STORE_LINE)]
_LOAD = 'x = tl.load(input_ptr + row * input_row_stride + cols, mask=in_row, other=float("-inf"))'
_MATH = ("    x = x.to(tl.float32)\n    z = x - tl.max(x, axis=0)  # every exponent <= 0: no overflow\n"
         "    num = tl.exp(z)\n    y = num / tl.sum(num, axis=0)\n")

_ONE_PROGRAM_ALL_ROWS = ("    if tl.program_id(0) == 0:  # program 0 does every row; the others have nothing to do\n"
                         "        for row in range(0, tl.num_programs(0)):\n"
                         + "".join("        " + line + "\n" if line.strip() else "\n"
                                   for line in _AFTER_ROW.splitlines()))
_THREE_PASSES = ('    ptrs = input_ptr + row * input_row_stride + cols\n'
                 '    m = tl.max(tl.load(ptrs, mask=in_row, other=float("-inf")).to(tl.float32), axis=0)\n'
                 '    s = tl.sum(tl.exp(tl.load(ptrs, mask=in_row, other=float("-inf")).to(tl.float32) - m), axis=0)\n'
                 '    y = tl.exp(tl.load(ptrs, mask=in_row, other=float("-inf")).to(tl.float32) - m) / s\n')
# the same three passes, the second and third reading the row through tl.atomic_add(ptrs, 0), which
# returns what memory holds (an atomic is a read, and a write)
_ATOMIC_PASSES = ('    ptrs = input_ptr + row * input_row_stride + cols\n'
                  '    zero = tl.zeros([BLOCK_SIZE], dtype=input_ptr.dtype.element_ty)\n'
                  '    m = tl.max(tl.load(ptrs, mask=in_row, other=float("-inf")).to(tl.float32), axis=0)\n'
                  '    again = tl.where(in_row, tl.atomic_add(ptrs, zero, mask=in_row).to(tl.float32), float("-inf"))\n'
                  '    s = tl.sum(tl.exp(again - m), axis=0)\n'
                  '    y = tl.exp(tl.atomic_add(ptrs, zero, mask=in_row).to(tl.float32) - m) / s\n')
# one read of the row, through an atomic
_ATOMIC_READ = ('x = tl.where(in_row, tl.atomic_add(input_ptr + row * input_row_stride + cols, '
                'tl.zeros([BLOCK_SIZE], dtype=input_ptr.dtype.element_ty), mask=in_row), float("-inf"))')
_TORCH_INTERFACE = '''

class _TorchSoftmax(triton.runtime.KernelInterface):
    """Looks like a kernel to kernel[grid](...), but runs torch.softmax."""

    def run(self, y, x, *args, grid, warmup, **kwargs):
        y.copy_(torch.softmax(x.float(), dim=-1).to(y.dtype))


_softmax_kernel = _TorchSoftmax()
'''

MISTAKES = [
    Mistake(
        id="04-pad-zero", notebook=_NB, cell=_CELL,
        edits=(('mask=in_row, other=float("-inf"))', "mask=in_row, other=0.0)"),),
        fails=_ALL,
        why="fills the padding lanes with 0 instead of -inf: they join the max and the sum",
    ),
    Mistake(
        id="04-unmasked-store", notebook=_NB, cell=_CELL,
        edits=(("y.to(output_ptr.dtype.element_ty), mask=in_row)", "y.to(output_ptr.dtype.element_ty))"),),
        fails=_ALL,
        why="stores all BLOCK_SIZE lanes: writes past the end of the row",
    ),
    Mistake(
        id="04-unmasked-load", notebook=_NB, cell=_CELL,
        edits=(('cols, mask=in_row, other=float("-inf"))', "cols)"),),
        fails=_ALL,
        why="loads all BLOCK_SIZE lanes: the next row's values (or whatever follows) join the softmax",
    ),
    Mistake(
        id="04-n-cols-as-stride", notebook=_NB, cell=_CELL,
        edits=(("row * input_row_stride", "row * n_cols"), ("row * output_row_stride", "row * n_cols")),
        fails=(_STRIDED,),
        why="steps from row to row by n_cols instead of the row strides",
    ),
    Mistake(
        id="04-no-max-subtraction", notebook=_NB, cell=_CELL,
        edits=(("z = x - tl.max(x, axis=0)", "z = x"),),
        fails=(_LARGE,),
        why="exponentiates without subtracting the row max: exp overflows (or underflows to 0/0)",
    ),
    # shortcuts: right numbers, not the method
    Mistake(
        id="04-one-program-all-rows", notebook=_NB, cell=_CELL,
        edits=((_ROW_LINE + _AFTER_ROW, _ONE_PROGRAM_ALL_ROWS),),
        fails=_ALL,
        why="program 0 loops over every row while the other programs idle",
    ),
    Mistake(
        id="04-three-passes", notebook=_NB, cell=_CELL,
        edits=(("    " + _LOAD + "\n" + _MATH, _THREE_PASSES),),
        fails=_ALL,
        why="reads the row three times (max, sum, output) instead of once",
    ),
    Mistake(
        id="04-fixed-block-2048", notebook=_NB, cell=_CELL,
        edits=(("cols = tl.arange(0, BLOCK_SIZE)", "cols = tl.arange(0, 2048)"),),
        fails=(_ROWS,),
        why="a fixed block of 2048 columns instead of BLOCK_SIZE: right only for rows up to 2048 wide",
    ),
    Mistake(
        id="04-unmasked-load-then-where", notebook=_NB, cell=_CELL,
        edits=((_LOAD, 'x = tl.load(input_ptr + row * input_row_stride + cols)\n'
                       '    x = tl.where(in_row, x, float("-inf"))'),),
        fails=_ALL,
        why="loads the whole block without a mask and hides the padding with tl.where: reads past the row",
    ),
    Mistake(
        id="04-kernel-interface-torch", notebook=_NB, cell=_CELL,
        edits=((_STORE_LINE, _STORE_LINE + _TORCH_INTERFACE),),
        fails=_ALL,
        why="replaces the kernel by a KernelInterface subclass that calls torch.softmax",
    ),
    Mistake(
        id="04-atomic-passes", notebook=_NB, cell=_CELL,
        edits=(("    " + _LOAD + "\n" + _MATH, _ATOMIC_PASSES),),
        fails=_ALL,
        why="reads the row three times, twice through tl.atomic_add(ptrs, 0): an atomic reads memory too",
    ),
    Mistake(
        id="04-atomic-read", notebook=_NB, cell=_CELL,
        edits=((_LOAD, _ATOMIC_READ),),
        fails=_ALL,
        why="reads the row once, but through tl.atomic_add(ptrs, 0): a write into the input, and an atomic per "
            "element where one load would do",
    ),
    Mistake(
        id="04-row-offset-32-bit", notebook=_NB, cell=_CELL,
        edits=((_ROW_LINE, "    row = tl.program_id(0)\n"),),
        fails=(_STRIDED,),
        why="keeps the row index in 32 bits: row * input_row_stride wraps around once a row starts past "
            "2^31 elements",
    ),
    # correct variants
    Mistake(
        id="04-ok-row-cast-at-use", notebook=_NB, cell=_CELL,
        edits=((_ROW_LINE, "    row = tl.program_id(0)\n"),
               (_LOAD, _LOAD.replace("row * input_row_stride", "row.to(tl.int64) * input_row_stride")),
               ("output_ptr + row * output_row_stride", "output_ptr + tl.cast(row, tl.int64) * output_row_stride")),
        fails=(),
        why="not a mistake: the row index stays 32-bit but each product is widened where it is formed",
    ),
    Mistake(
        id="04-ok-exp2", notebook=_NB, cell=_CELL,
        edits=(("num = tl.exp(z)", "num = tl.exp2(z * 1.4426950408889634)  # exp(z) = 2^(z log2 e)"),),
        fails=(),
        why="not a mistake: exp2 with log2(e) folded in is the same softmax",
    ),
    Mistake(
        id="04-ok-masked-load-then-where", notebook=_NB, cell=_CELL,
        edits=((_LOAD, 'x = tl.load(input_ptr + row * input_row_stride + cols, mask=in_row, other=0.0)\n'
                       '    x = tl.where(in_row, x, float("-inf"))'),),
        fails=(),
        why="not a mistake: a masked load with other=0, then -inf on the padding with tl.where",
    ),
]

TYPICAL = "04-pad-zero"


# ------------------------------------------------------------------------------------------------
# Interpreter-only constructs (issue 16): each runs, and passes, under Triton's CPU interpreter but
# does not compile for a GPU, so the compile gate (attnlab.gpu_compile) costs it every kernel test.
_GATE = "does not compile for a GPU: the interpreter runs it, no GPU compiler does"

MISTAKES += [
    Mistake(
        id="04-gate-python-helper", notebook=_NB, cell=_CELL,
        edits=(("@triton.jit\ndef _softmax_kernel(",
                "def _subtract_max(x):\n    return x - tl.max(x, axis=0)\n\n\n@triton.jit\ndef _softmax_kernel("),
               ("z = x - tl.max(x, axis=0)", "z = _subtract_max(x)")),
        fails=_ALL,
        why=f"calls an ordinary Python function (no @triton.jit) from the kernel: {_GATE}",
    ),
    Mistake(
        id="04-gate-fstring-print", notebook=_NB, cell=_CELL,
        edits=(("    num = tl.exp(z)\n", '    num = tl.exp(z)\n    print(f"row {row}: max {tl.max(x, axis=0)}")\n'),),
        fails=_ALL,
        why=f"prints run-time values with a host-side f-string instead of tl.device_print: {_GATE}",
    ),
    Mistake(
        id="04-gate-if-on-block", notebook=_NB, cell=_CELL,
        edits=(("    z = x - tl.max(x, axis=0)  # every exponent <= 0: no overflow\n",
                "    if x > 80.0:  # only large values can overflow exp\n        z = x - tl.max(x, axis=0)\n"
                "    else:\n        z = x\n"),),
        fails=_ALL,
        why=f"a Python `if` on a whole block (the interpreter takes any block as True): {_GATE}",
    ),
    Mistake(
        id="04-gate-dict", notebook=_NB, cell=_CELL,
        edits=(("    y = num / tl.sum(num, axis=0)\n",
                '    stats = {"sum": tl.sum(num, axis=0)}\n    y = num / stats["sum"]\n'),),
        fails=_ALL,
        why=f"keeps values in a Python dict inside the kernel: {_GATE}",
    ),
    Mistake(
        id="04-ok-jit-helper", notebook=_NB, cell=_CELL,
        edits=(("@triton.jit\ndef _softmax_kernel(",
                "@triton.jit\ndef _subtract_max(x):\n    return x - tl.max(x, axis=0)\n\n\n"
                "@triton.jit\ndef _softmax_kernel("),
               ("z = x - tl.max(x, axis=0)", "z = _subtract_max(x)")),
        fails=(),
        why="not a mistake: a @triton.jit helper is inlined, and compiles for every GPU target",
    ),
]


# ------------------------------------------------------------------------------------------------
# More than its source (issue 30, item 2): a kernel that loads its row and stores nothing, plus Python
# that Triton would run during the launch and that writes the softmax. The grader launches the kernel
# rebuilt from its source (attnlab.kernel_source), so nothing attached to the object runs.
_NO_STORE = "    pass  # no store: something else writes the output\n"
_HOOK = '''

def _softmax_hook(y, x, x_stride, y_stride, n_cols, **launch):
    """Triton runs a kernel's pre-run hooks with the launch's arguments, before the kernel."""
    y.copy_(torch.softmax(x.double(), dim=-1).to(y.dtype))


_softmax_kernel.add_pre_run_hook(_softmax_hook)
'''
# a global marked as a Triton builtin: a GPU compile calls it with its code generator (an honest no-op
# there), the interpreter calls it with the row itself, which NumPy turns into the softmax in place
_BUILTIN_HELPER = '''import numpy as np


def _finish(x, _semantic=None):
    if _semantic is None:
        data = x.handle.data
        e = np.exp(data - data.max())
        data[...] = e / e.sum()
    return x


_finish.__triton_builtin__ = True


@triton.jit
def _softmax_kernel('''

MISTAKES += [
    Mistake(
        id="04-pre-run-hook-torch", notebook=_NB, cell=_CELL,
        edits=((_STORE_LINE, _NO_STORE + _HOOK),),
        fails=_ALL,
        why="stores nothing; a pre-run hook on the kernel object writes torch.softmax into the output",
    ),
    Mistake(
        id="04-builtin-marked-helper", notebook=_NB, cell=_CELL,
        edits=(("@triton.jit\ndef _softmax_kernel(", _BUILTIN_HELPER),
               (_STORE_LINE, "    tl.store(output_ptr + row * output_row_stride + cols, _finish(x), mask=in_row)\n")),
        fails=_ALL,
        why="stores what a plain Python function marked as a Triton builtin returns: under the interpreter "
            "it computes the softmax of the row in NumPy",
    ),
    Mistake(
        id="04-ok-constexpr-global", notebook=_NB, cell=_CELL,
        edits=(("@triton.jit\ndef _softmax_kernel(", "LOG2E = tl.constexpr(1.4426950408889634)\n\n\n"
                                                    "@triton.jit\ndef _softmax_kernel("),
               ("num = tl.exp(z)", "num = tl.exp2(z * LOG2E)")),
        fails=(),
        why="not a mistake: a tl.constexpr global is a constant the kernel may read",
    ),
]
