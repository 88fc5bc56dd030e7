# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 99 · Triton probe (used only by the course's tests)
#
# A tiny notebook with a Triton kernel graded through `attnlab.verify`, so the grader's handling of
# a kernel that never finishes under the interpreter is tested whatever Triton notebooks the course
# has. The test suite adds it to a scratch copy of the course; it is never released.

# %% nbgrader={"grade_id": "setup", "locked": true}
from attnlab import init

RUNTIME = init()

import torch
import triton
import triton.language as tl

from attnlab.verify import check_softmax_kernel

# %% nbgrader={"grade_id": "_softmax_kernel", "solution": true}
@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(input_ptr + row * input_row_stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(output_ptr + row * output_row_stride + offs, num / tl.sum(num, axis=0), mask=mask)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_softmax_kernel", "grade": true, "locked": true, "points": 2}
check_softmax_kernel(_softmax_kernel, n_rows=3, n_cols=37)
### BEGIN HIDDEN TESTS
check_softmax_kernel(_softmax_kernel, n_rows=2, n_cols=128, seed=1)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "answer", "solution": true}
answer = None
### BEGIN SOLUTION
answer = 42
### END SOLUTION

# %% nbgrader={"grade_id": "test_answer", "grade": true, "locked": true, "points": 1}
assert answer == 42, "answer must be 42"
