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
