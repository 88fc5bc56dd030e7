"""Typical mistakes in notebook 04 (format: samples/README.md)."""

from attnlab.grading.samples import Mistake

_NB, _CELL = "04_triton_softmax", "_softmax_kernel"
_ALL = ("test_softmax_kernel_rows", "test_softmax_kernel_large_values", "test_softmax_kernel_strided_rows")

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
        fails=("test_softmax_kernel_strided_rows",),
        why="steps from row to row by n_cols instead of the row strides",
    ),
    Mistake(
        id="04-no-max-subtraction", notebook=_NB, cell=_CELL,
        edits=(("z = x - tl.max(x, axis=0)", "z = x"),),
        fails=("test_softmax_kernel_large_values",),
        why="exponentiates without subtracting the row max: exp overflows (or underflows to 0/0)",
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
