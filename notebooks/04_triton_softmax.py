# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · A fused softmax in Triton
#
# *Attention Kernels Lab, notebook 4 of 6.* Notebooks 01 to 03 built the online softmax and
# FlashAttention out of PyTorch operations: correct, but every operation is still its own trip
# through GPU memory. From here on
# you write **kernels**, small programs that the GPU runs thousands of times in parallel, in
# [Triton](https://triton-lang.org). This notebook teaches the model with the smallest kernel that
# matters: a row-wise softmax that reads each input element once and writes each output element
# once. Notebook 05 reuses every idea here for the FlashAttention forward pass.
#
# **No GPU? No problem.** Without a GPU, Triton runs your kernel through its *interpreter*: the same
# Python source, executed with NumPy on the CPU. It is slow, so the tests use small sizes, but the
# results are the same (and you can `print` inside a kernel). Cells that measure speed need a GPU;
# without one they print a note and skip. With a GPU, the tests still run their small float32
# cases this way, where they can count which elements your kernel reads, and add large cases
# compiled for the GPU.
#
# **How this notebook works.** Run the cells from the top. Cells marked *given* are read-only.
# Write code where it says `YOUR CODE HERE` and answers where it says `YOUR ANSWER HERE`. Hidden
# tests run when your notebook is graded, so pass the visible ones *and* think about the cases
# they leave out.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode (and switches Triton to its interpreter on a CPU) before any kernel
# is defined, then loads the course's support package.
from attnlab import init

RUNTIME = init()

import torch
import triton
import triton.language as tl

from attnlab import bench, launch
from attnlab.checks import time_limit
from attnlab.verify import call_limit_s, check_softmax_kernel, check_softmax_kernel_large_offsets

DEVICE = RUNTIME.device  # "cuda" on a GPU, "cpu" under the interpreter

# %% [markdown]
# ## 1. Triton's model in one page
#
# **Programs and the launch grid.** A Triton kernel is a function decorated with `@triton.jit`
# that describes the work of *one program*: one tile of the problem. You launch it on a grid,
# `kernel[grid](args...)`, where `grid` is a tuple of up to three sizes; the GPU runs one program
# per grid point, in any order and mostly at the same time. Inside, `tl.program_id(axis)` says
# which grid point this program is, and therefore which tile it owns. Programs cannot talk to each
# other during a launch, so a good decomposition gives each one a tile it can finish alone.
#
# **Vectors of indices.** Inside a program you do not loop over elements; you work on whole
# blocks at once. `tl.arange(0, BLOCK)` is the vector $[0, 1, \dots, \text{BLOCK}-1]$. Its length
# must be a compile-time constant (a parameter annotated `tl.constexpr`) and a **power of two**:
# Triton compiles one specialised version of the kernel per value and lays the block out over
# threads in power-of-two pieces.
#
# **Pointers, masks and ragged edges.** Tensors arrive as pointers to their first element. You build
# a block of addresses with ordinary arithmetic, `ptr + row * row_stride + cols`, and read or write
# them with `tl.load(addresses, mask=..., other=...)` and `tl.store(addresses, values, mask=...)`.
# Problem sizes are rarely powers of two, so the last block usually hangs over the edge: the
# `mask` switches those lanes off. A masked-off load returns `other` instead of touching memory;
# a masked-off store writes nothing. Choose `other` so the padding is harmless to what you compute
# next (you will see why $-\infty$ is the right filler for a softmax).
#
# **Matrix products on the tensor cores.** `tl.dot(a, b)` multiplies two 2-D blocks (each side at
# least 16) on the tensor cores. Feed it 16-bit inputs, accumulate in float32
# (`tl.dot(a, b, acc)` adds into an fp32 accumulator), and convert to the output dtype only when
# storing. With float32 inputs a GPU uses TF32 by default, about three decimal digits, which is
# why float32 tests compiled for a GPU are looser (2e-3) than those run on the CPU (1e-5).
#
# **Where data lives.** Everything a program creates, index vectors, loaded blocks, running
# statistics, lives in registers or on-chip shared memory (SRAM). Global memory (HBM) is touched
# only by `tl.load` and `tl.store`. So a chain of operations written in one kernel costs one read
# of its inputs and one write of its outputs, however long the chain is: that is what *fusion*
# means, and why it wins for memory-bound work such as a softmax.
#
# **Debugging on a CPU.** With `TRITON_INTERPRET=1` (set for you by the setup cell when there is no
# GPU), each program runs as Python with NumPy arrays, one after another. You can `print(...)`
# inside a kernel to see a block's values, use a debugger, and get Python tracebacks. On a GPU,
# the same `print` becomes `tl.device_print` and prints from every thread, so keep it for tiny
# launches.
#
# The given kernel below shows all of it on a 10-element vector with blocks of 8: two programs,
# the second with a ragged edge. Run it and read the output.

# %% nbgrader={"grade_id": "demo-kernel", "locked": true}
# Given: y = 2 x + 1 with blocks of BLOCK elements; DEBUG prints each program's offsets and mask.
@triton.jit
def _two_x_plus_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr, DEBUG: tl.constexpr):
    pid = tl.program_id(0)                      # which block this program owns
    offs = pid * BLOCK + tl.arange(0, BLOCK)    # its element indices
    mask = offs < n                             # lanes past the end are switched off
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if DEBUG:                                   # a constexpr: the branch is compiled away when False
        print("mask", mask)
    tl.store(y_ptr + offs, 2 * x + 1, mask=mask)


x_demo = torch.arange(10, dtype=torch.float32, device=DEVICE)
y_demo = torch.full_like(x_demo, float("nan"))
# On a GPU every thread of both programs would print: keep the printing to the interpreter.
_two_x_plus_one[(triton.cdiv(10, 8),)](x_demo, y_demo, 10, BLOCK=8, DEBUG=RUNTIME.interpret)
print("y =", y_demo.tolist())

# %% [markdown]
# ## 2. One program per row
#
# A softmax normalises each row of a matrix $X \in \mathbb{R}^{R \times N}$ independently:
#
# $$y_{ij} = \frac{e^{x_{ij} - m_i}}{\sum_{k} e^{x_{ik} - m_i}}, \qquad m_i = \max_k x_{ik}.$$
#
# Rows never interact, so the natural decomposition is **one program per row**: grid $(R,)$, and
# program $i$ owns row $i$. When a row fits in one block (up to a few thousand columns, the case
# this kernel handles), the program can load the whole row into registers, reduce it twice (max,
# then sum), and store the result: one read and one write of the row, nothing in between. A
# PyTorch expression such as `torch.exp(x - x.amax(-1, keepdim=True))` followed by a division
# would launch several kernels and move the matrix through memory several times.
#
# The details that make it correct:
#
# - **Block size.** `tl.arange` needs a power of two, so the launcher passes
#   `BLOCK_SIZE = triton.next_power_of_2(n_cols)`: 37 columns use a block of 64, 1000 use 1024.
# - **Which lanes are real.** Lanes `cols >= n_cols` are padding. Load with
#   `mask=cols < n_cols` and fill the rest with `other=-inf`: then $e^{-\infty - m} = 0$, so padding
#   adds nothing to the sum, and $-\infty$ never wins the max. A filler of 0 would do both wrong
#   (add $e^{-m}$ per padded lane, and be the maximum of a row of negative numbers).
# - **Subtract the max** before exponentiating. $e^{x}$ overflows float32 for $x > 88.7$;
#   $e^{x - m} \le 1$ never does. The result is unchanged (notebook 01).
# - **Compute in float32.** Load float16/bfloat16 rows, convert to `tl.float32` for the arithmetic,
#   and convert back on the store (`output_ptr.dtype.element_ty` is the output's element type).
# - **Rows are `row_stride` apart, not `n_cols`.** A row of a 2-D tensor starts
#   `row * x.stride(0)` elements after the first. For a contiguous tensor that equals `n_cols`, but a
#   slice such as `big[:, :n_cols]` has longer rows; input and output may even differ.
# - **Masked stores.** Store only `cols < n_cols`; otherwise the padded lanes of row $i$ land in
#   row $i+1$ (or past the end of the tensor).
# - **Large offsets.** `row * row_stride` is computed in 32-bit integers unless you widen it:
#   `tl.program_id(0).to(tl.int64)` keeps addresses right for tensors over $2^{31}$ elements.

# %% [markdown]
# ### Your task: `_softmax_kernel`
#
# `_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE)`
#
# - launched on grid `(n_rows,)` by the given `triton_softmax` below, with
#   `BLOCK_SIZE = triton.next_power_of_2(n_cols)`;
# - program `i` reads row `i` of the input (`n_cols` values starting at
#   `input_ptr + i * input_row_stride`) and writes its softmax to row `i` of the output
#   (starting at `output_ptr + i * output_row_stride`), in the output's dtype;
# - it must not read or write any element outside those rows.
#
# Useful: `tl.program_id`, `tl.arange`, `tl.load(..., mask=, other=)`, `tl.max(x, axis=0)`,
# `tl.exp`, `tl.sum(x, axis=0)`, `tl.store(..., mask=)`, `x.to(tl.float32)`.
#
# The whole contract of `_softmax_kernel` in one place: `attnlab.contracts.softmax_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.softmax_kernel)`).

# %% nbgrader={"grade_id": "_softmax_kernel", "solution": true}
@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                    BLOCK_SIZE: tl.constexpr):
    """Softmax of one row per program: program i reads input row i and writes output row i.

    Args:
        output_ptr, input_ptr: the first elements of the output and input matrices.
        input_row_stride, output_row_stride: elements from the start of one row to the next.
        n_cols: the length of each row (not a power of two in general).
        BLOCK_SIZE: a power of two >= n_cols; lanes >= n_cols are padding.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # 64-bit, so row * stride cannot overflow
    cols = tl.arange(0, BLOCK_SIZE)
    in_row = cols < n_cols
    # padding lanes read -inf: exp(-inf) = 0 adds nothing to the sum and never wins the max
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=in_row, other=float("-inf"))
    x = x.to(tl.float32)
    z = x - tl.max(x, axis=0)  # every exponent <= 0: no overflow
    num = tl.exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(output_ptr + row * output_row_stride + cols, y.to(output_ptr.dtype.element_ty), mask=in_row)
    ### END SOLUTION


# %% nbgrader={"grade_id": "triton_softmax", "locked": true}
# Given: the launcher. It checks x (2-D; float32 or float16, and bfloat16 on a GPU only: Triton's
# CPU interpreter gets bfloat16 wrong), makes it contiguous, allocates y full of NaN (an element
# your kernel forgets stays NaN) and launches one program per row with
# BLOCK_SIZE = next_power_of_2(n_cols). In the small float32 cases, which run through the interpreter
# on every machine, the tests also count your kernel's loads: program i must read row i, each column once.
def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor by your `_softmax_kernel`."""
    return launch.launch_softmax(_softmax_kernel, x)


# %% [markdown]
# Try it before the tests: the largest difference from `torch.softmax` should be around 1e-7 in
# float32. If your kernel raises, the interpreter's traceback points at the kernel line; add a
# `print` inside the kernel and run this cell again.

# %% nbgrader={"grade_id": "try-softmax", "locked": true}
x_try = torch.randn(3, 37, device=DEVICE)
with time_limit(call_limit_s(), "triton_softmax"):  # a kernel that never returns fails after 20 s on a CPU
    y_try = triton_softmax(x_try)
print("max |triton_softmax - torch.softmax| =", (y_try - torch.softmax(x_try, dim=-1)).abs().max().item())
print("row sums:", y_try.sum(dim=-1).tolist())

# %% [markdown]
# ### Test: rows of any length
#
# The check launches your kernel on seeded random rows (never zeros) and compares with
# `torch.softmax` in float64. The output starts as NaN, and memory after the last row holds a
# guard value: writing past a row, or forgetting an element, fails with the row and column.

# %% nbgrader={"grade_id": "test_softmax_kernel_rows", "grade": true, "locked": true, "points": 3}
for n_cols in (37, 128, 1000):
    check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=n_cols)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for seed, n_cols in enumerate((1, 2, 3, 17, 255, 257, 781, 1500)):
    check_softmax_kernel(_softmax_kernel, n_rows=3, n_cols=n_cols, seed=10 + seed)
check_softmax_kernel(_softmax_kernel, n_rows=9, n_cols=100, seed=30)
check_softmax_kernel(_softmax_kernel, n_rows=3, n_cols=5000, seed=31)  # wider than any fixed block
for seed, peak in enumerate(("first", "middle", "last")):  # the row max in the first, a middle, the last column
    check_softmax_kernel(_softmax_kernel, n_rows=3, n_cols=300, peak=peak, seed=32 + seed)
if not RUNTIME.interpret:  # sizes that fill a GPU, and 16-bit inputs
    for n_rows, n_cols in ((4096, 1000), (1024, 4097), (300, 16384)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            check_softmax_kernel(_softmax_kernel, n_rows=n_rows, n_cols=n_cols, dtype=dtype, seed=n_cols)
    for seed, peak in enumerate(("first", "last")):  # the peaks above, compiled
        check_softmax_kernel(_softmax_kernel, n_rows=4096, n_cols=1000, peak=peak, seed=60 + seed)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: large values
#
# Rows shifted by $+1000$ overflow $e^x$ unless the max is subtracted; rows shifted by $-1000$
# underflow it to 0 everywhere (and then $0/0$). Both have a perfectly good softmax.

# %% nbgrader={"grade_id": "test_softmax_kernel_large_values", "grade": true, "locked": true, "points": 2}
check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=128, offset=1000.0)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=37, offset=1000.0, seed=1)
check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=37, offset=-1000.0, seed=2)
check_softmax_kernel(_softmax_kernel, n_rows=5, n_cols=300, offset=90.0, seed=3)
check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=300, offset=-30.0, seed=7)  # every value negative
check_softmax_kernel(_softmax_kernel, n_rows=3, n_cols=1000, offset=-1000.0, peak="last", seed=8)
if not RUNTIME.interpret:
    check_softmax_kernel(_softmax_kernel, n_rows=2048, n_cols=1000, offset=1000.0, seed=4)
    check_softmax_kernel(_softmax_kernel, n_rows=2048, n_cols=1000, offset=-1000.0, seed=5)
    check_softmax_kernel(_softmax_kernel, n_rows=2048, n_cols=1000, offset=1000.0, dtype=torch.float16, seed=6)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: rows that are longer than `n_cols`
#
# Here input and output are slices `buffer[:, :n_cols]` of wider buffers, so a row starts
# `row_stride` elements after the previous one, not `n_cols`. The input's extra columns hold
# large values your kernel must not read; the output's hold a guard value it must not overwrite.

# %% nbgrader={"grade_id": "test_softmax_kernel_strided_rows", "grade": true, "locked": true, "points": 2}
check_softmax_kernel(_softmax_kernel, n_rows=4, n_cols=37, padded=True)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for seed, n_cols in enumerate((1, 64, 100, 1000)):
    check_softmax_kernel(_softmax_kernel, n_rows=5, n_cols=n_cols, padded=True, seed=40 + seed)
if not RUNTIME.interpret:
    for dtype in (torch.float32, torch.bfloat16):
        check_softmax_kernel(_softmax_kernel, n_rows=4096, n_cols=1000, padded=True, dtype=dtype, seed=50)
# rows 2^30 elements apart: the last one starts at element 2^31 (on the CPU, only the rows exist)
check_softmax_kernel_large_offsets(_softmax_kernel, seed=51)
check_softmax_kernel_large_offsets(_softmax_kernel, n_cols=300, seed=52)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. How fast is it? (GPU)
#
# A softmax does a few operations per element and must read every input byte and write every
# output byte, so its speed limit is memory bandwidth, not arithmetic. The honest yardstick is
# therefore **bytes moved per second** (GB/s, $10^9$ B/s) against the fastest thing the device can
# do with the same bytes: a device-to-device copy, which also reads $n$ bytes and writes $n$.
# A fused softmax that reaches 80 to 90 % of copy bandwidth is close to optimal. A kernel that
# reads its input twice from memory moves 3 bytes for every 2 counted, so it cannot beat 67 %
# (with one row per program the second read usually comes from the cache, which is why fusing
# the row into one program pays).
#
# ### Predict before you measure
#
# Store each answer as a plain number.
#
# 1. `softmax_bytes`: the bytes a fused softmax must move for a float32 input of shape
#    (4096, 1024): read the input once, write the output once.
# 2. `softmax_min_us`: the shortest possible time for it, in **microseconds**, on a device whose
#    copy bandwidth (read + write) is 4 TB/s ($4 \cdot 10^{12}$ B/s).

# %% nbgrader={"grade_id": "predict-softmax-bytes", "solution": true}
softmax_bytes = None
softmax_min_us = None
### BEGIN SOLUTION
softmax_bytes = 2 * 4096 * 1024 * 4
softmax_min_us = softmax_bytes / 4e12 * 1e6
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-softmax-bytes", "grade": true, "locked": true, "points": 1}
from attnlab.checks import assert_number, require_number

require_number(softmax_bytes, "softmax_bytes")
require_number(softmax_min_us, "softmax_min_us")
### BEGIN HIDDEN TESTS
assert_number(softmax_bytes, 2 * 4096 * 1024 * 4, name="softmax_bytes", rel=0.01)
assert_number(softmax_min_us, 2 * 4096 * 1024 * 4 / 4e12 * 1e6, name="softmax_min_us", rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# **Predict in words.** The measurement below times rows of 256 to 16384 float32 columns, with
# enough rows that each run moves 1 GiB, and then once more the (4096, 1024) input of your
# prediction, which moves 32 MiB. Before running it: at 1024 columns and 1 GiB, will your kernel be
# faster or slower than `torch.softmax`, and roughly what fraction of the copy bandwidth do you
# expect each to reach? What changes at 16384 columns, where one program holds a 64 KiB row in
# registers? And will the 32 MiB run reach the same fraction as the 1 GiB run at the same width?
# Write down a reason, not just a guess.

# %% [markdown] nbgrader={"grade_id": "answer-predict-bandwidth", "solution": true, "grade": true, "points": 1}
# At 1024 columns and 1 GiB per run both kernels read each row once and write it once, so both
# should come close to copy bandwidth, and mine can at best match `torch.softmax`: there is nothing
# left to fuse. On an H200 (2026-11-30, copy 4,274 GB/s) mine reached 98 % and `torch.softmax` 95 %.
# At 16384 columns my kernel still holds a whole 64 KiB row in one program (16 warps, 32 floats a
# thread) and one read and one write per element are all it does: 96 %. `torch.softmax` fell to 76 %
# there (60 % at 4096 columns): for rows longer than 1024 elements PyTorch runs another kernel (a
# block per row instead of a warp per row), which reaches less of the bandwidth here. The 32 MiB run
# does not reach the same fraction: at copy bandwidth it would take 7.9 µs (my prediction, at
# 4 TB/s: 8.4 µs), but it took 12.8 µs (61 %; torch 15.4 µs, 51 %). A few microseconds of every
# launch do not depend on its size (starting the grid, the latency of the first loads, the last
# programs finishing alone), and in a run this short they are about 40 % of the time: small inputs
# are launch-bound, which is why the bench sizes its rows by bytes. (At 256 columns mine reached
# only 72 %: 256 values give the 4 warps of one program two elements a thread, too little work per
# program, where `torch.softmax` packs several rows into each block.)

# %% [markdown]
# The measurement (GPU only). `bench.median_ms` times with CUDA events through
# `triton.testing.do_bench` after warm-up and reports a median; `bench.copy_bandwidth_gbs` copies
# 2 GiB to measure the ceiling. Inputs are random, never zeros. A bandwidth figure means something
# only when the run moves enough bytes: every launch also pays a few microseconds that do not
# depend on its size (starting the grid, waiting for the first loads, the last programs finishing
# alone), so `bench.rows_for_bytes` picks the rows that make each run move 1 GiB, a quarter of a
# millisecond at 4 TB/s. The last line repeats your predicted (4096, 1024) case, 32 MiB, to show
# what those fixed costs do to a run of a few microseconds. The cell times your kernel alone,
# launched exactly as `triton_softmax` launches it but into an output allocated once:
# `triton_softmax` fills every new output with NaN first (a testing aid), and that fill is a full
# extra write of the output that `torch.softmax` does not do. On a CPU this cell only prints a note.

# %% nbgrader={"grade_id": "bench-softmax", "locked": true}
if RUNTIME.interpret:
    print("Skipped: no GPU. Interpreter timings say nothing about a GPU kernel; run this cell on a GPU "
          "(for example Colab) to measure GB/s.")
elif bench.autograding():
    print("Autograding: the timings are not graded, so this cell measures nothing.")
else:
    copy_gbs = bench.copy_bandwidth_gbs()
    print(f"device copy bandwidth (read + write): {copy_gbs:,.0f} GB/s\n")
    print(f"{'n_rows':>8} {'n_cols':>7} {'MiB moved':>9} {'yours µs':>9} {'GB/s':>7} {'% copy':>7} "
          f"{'torch µs':>9} {'GB/s':>7} {'% copy':>7}")
    sizes = [(bench.rows_for_bytes(n_cols, 4), n_cols) for n_cols in (256, 1024, 4096, 16384)]
    for n_rows, n_cols in sizes + [(4096, 1024)]:  # 1 GiB per run, then your predicted 32 MiB case
        x_b = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float32)
        y_b = torch.empty_like(x_b)
        moved = 2 * x_b.numel() * x_b.element_size()
        # the kernel alone, as triton_softmax launches it, into an output allocated once
        ms_yours = bench.median_ms(lambda: launch.run_softmax_kernel(_softmax_kernel, x_b, y_b))
        ms_torch = bench.median_ms(lambda: torch.softmax(x_b, dim=-1))
        gbs_yours, gbs_torch = bench.gb_per_s(moved, ms_yours), bench.gb_per_s(moved, ms_torch)
        print(f"{n_rows:>8} {n_cols:>7} {moved / 2**20:>9,.0f} {ms_yours * 1e3:>9.1f} {gbs_yours:>7,.0f} "
              f"{gbs_yours / copy_gbs:>7.0%} {ms_torch * 1e3:>9.1f} {gbs_torch:>7,.0f} {gbs_torch / copy_gbs:>7.0%}")
        del x_b, y_b

# %% [markdown]
# ## 4. Check yourself
#
# Answer in two to four sentences each, in your own words. These are graded by hand.
#
# **Q1.** Your kernel loads padding lanes with `other=-inf`. What exactly goes wrong with
# `other=0.0` for a row of 37 columns, and is there any row for which 0 would happen to be harmless?

# %% [markdown] nbgrader={"grade_id": "answer-pad-value", "solution": true, "grade": true, "points": 1}
# With `other=0.0` the 27 padding lanes of the 64-wide block take part in both reductions as real
# zeros. If every real value is negative, 0 becomes the row max, so the offset is wrong (and a row
# shifted by −1000 underflows to all zeros over a denominator of 27). In every case each padding lane
# adds $e^{0 - m}$ to the denominator, shrinking every probability. It is harmless only when no lane is
# padding (`n_cols` a power of two) or, up to rounding, when $m$ is so large that $e^{-m}$ vanishes.

# %% [markdown]
# **Q2.** Why is copy bandwidth, rather than the GPU's peak FLOP/s, the right ceiling for this
# kernel? Count the floating-point operations per byte moved.

# %% [markdown] nbgrader={"grade_id": "answer-ceiling", "solution": true, "grade": true, "points": 1}
# Per element the kernel does about five operations (compare for the max, subtract, exponentiate, add
# for the sum, divide) and moves 8 bytes in float32 (4 read, 4 written): well under one FLOP per byte.
# A GPU can do hundreds of FLOPs per byte it loads from HBM, so the arithmetic units idle and the time
# is set by how fast bytes come and go. No kernel that must read and write those bytes can beat a plain
# copy of them, so the copy rate is the ceiling and "% of copy" says how close to optimal we are.

# %% [markdown]
# **Q3.** This kernel keeps a whole row in one program. What breaks, or gets slow, for rows of a
# million columns, and how would you restructure the kernel? (Think of notebook 01.)

# %% [markdown] nbgrader={"grade_id": "answer-long-rows", "solution": true, "grade": true, "points": 1}
# The block must be the next power of two of the row, so a million columns means a block of $2^{20}$
# values in one program: far more registers than a streaming multiprocessor has, so it spills to
# local memory (or fails to compile) and a single program crawls through one row while most of the GPU
# sits idle if there are few rows. Instead loop over the row in fixed chunks with the online softmax
# of notebook 01 (running max and rescaled sum) in one pass, then a second pass to write
# $e^{x - m}/\ell$; or split one row over several programs and merge their $(m, \ell)$ pairs with the
# same rescaling rule.

# %% [markdown] nbgrader={"grade_id": "speed", "task": true, "locked": true, "points": 0}
# ## Speed, as the grader measures it
#
# Nothing to write here. On a GPU grader, once every test above passes, your `_softmax_kernel` is timed against
# the course's own kernels on one fixed problem (4096 rows of 8192 float32 values, through `triton_softmax`). The timing runs in a separate process that
# loads only the `@triton.jit` definitions of your solution cells (no other code of this notebook),
# with fresh random inputs and a cold L2 cache for every repetition, and every repetition's result is
# checked. You see your ratio to the course's kernel and your GB/s here after grading, and your place
# on the class leaderboard. If your instructor gives this cell points, a ratio of 0.5 or less earns none
# and 0.9 or more earns all of them, linearly in between (the instructor may change both marks).
# A grader without a GPU leaves this cell for later, marked "needs GPU timing".
