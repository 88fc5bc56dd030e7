"""The work ledger (attnlab.checking.loads) and the cost models the notebooks declare (attnlab.checking.work_models), issue 30.

- The ledger counts every way a kernel reads memory (tl.load, atomics, which read and write) per
  launch and per program, records tl.dot shapes and FLOPs, and knows every memory method of the
  installed Triton's interpreter.
- Each shortcut of issue 30 (atomics as reads, no causal skipping in 07, one program doing every
  tile, one key per iteration without tl.dot, the whole slice as one tile) fails with the rule and
  the figure measured; honest variants (other tile sizes, dQ by atomics, any split count) pass.
- A race on a shared accumulator is caught from the ledger however tl.store is spelled (issue 31, 4).

(That each sample mistake loses exactly its test cells is tests/test_mistakes.py's job.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.core import device
from attnlab.checking import loads
from attnlab.verify import check_flash_kernel, check_softmax_kernel
from attnlab.verify_backward import check_flash_backward_kernels
from attnlab.verify_decode import check_decode_partial_kernel

from .test_triton_method import flash_kernel, load, softmax_kernel

RT = device.init(verbose=False)
pytestmark = pytest.mark.skipif(not RT.interpret, reason="the work ledger runs under Triton's interpreter")


def backward(mistake_id=None):
    mod = load("07_triton_backward", mistake_id)
    return mod._bwd_preprocess_kernel, mod._bwd_dkdv_kernel, mod._bwd_dq_kernel


def decode(mistake_id=None):
    return load("08_flash_decoding", mistake_id)._decode_partial_kernel


# ------------------------------------------------------------------------------------ the ledger
def _handles(buf, offsets, mask):
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    ptrs = TensorHandle(np.array([buf.data_ptr() + 4 * i for i in offsets], dtype=np.uint64),
                        tl.pointer_type(tl.float32))
    return ptrs, TensorHandle(np.array(mask), tl.int1)


def test_an_atomic_is_a_read_and_a_write():
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, interpreter_builder
    from triton._C.libtriton import ir

    buf = torch.arange(8, dtype=torch.float32)
    with loads.record({"x": buf}) as ledger:
        interpreter_builder.set_grid_dim(1, 1, 1)
        interpreter_builder.set_grid_idx(0, 0, 0)
        ptrs, mask = _handles(buf, (1, 2, 3), [True, True, False])
        zeros = TensorHandle(np.zeros(3, dtype=np.float32), tl.float32)
        got = interpreter_builder.create_atomic_rmw(ir.ATOMIC_OP.FADD, ptrs, zeros, mask, ir.MEM_SEMANTIC.RELAXED,
                                                    None)
    assert got.data[:2].tolist() == [1.0, 2.0]  # it returned what memory held: a read
    (access,) = ledger.accesses
    assert (access.kind, access.index.tolist()) == ("atomic", [1, 2])
    assert ledger.of("x", loads.READS) == [access] == ledger.of("x", loads.WRITES)


def test_a_wide_load_reads_every_element_it_covers():
    """A float32 row read through an int64 pointer: each lane reads two elements (a red team read a
    row twice, the second pass shifted by one column, and every column counted once)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, interpreter_builder

    buf = torch.arange(8, dtype=torch.float32)
    with loads.record({"x": buf}) as ledger:
        interpreter_builder.set_grid_dim(1, 1, 1)
        interpreter_builder.set_grid_idx(0, 0, 0)
        ptrs = TensorHandle(np.array([buf.data_ptr() + 8 * i for i in range(3)], dtype=np.uint64),
                            tl.pointer_type(tl.int64))
        mask = TensorHandle(np.array([True, True, True]), tl.int1)
        interpreter_builder.create_masked_load(ptrs, mask, None, None, None)
    (access,) = ledger.accesses
    assert sorted(access.index.tolist()) == [0, 1, 2, 3, 4, 5]
    # a wide lane that runs past the tensor's end is outside it: switched off, not half-counted
    with loads.record({"x": buf}) as ledger:
        interpreter_builder.set_grid_dim(1, 1, 1)
        interpreter_builder.set_grid_idx(0, 0, 0)
        ptrs = TensorHandle(np.array([buf.data_ptr() + 28], dtype=np.uint64), tl.pointer_type(tl.int64))
        interpreter_builder.create_masked_load(ptrs, TensorHandle(np.array([True]), tl.int1), None, None, None)
    assert not ledger.accesses and ledger.current.strays


def test_launches_programs_and_products_are_recorded():
    """Per launch: the kernel's name and grid; per program: its accesses, load calls and tl.dot shapes."""
    kernels = backward()
    B, H, T, D = 1, 1, 32, 16
    qkv = [torch.randn(B, H, T, D) for _ in range(4)]
    bufs = {n: t for n, t in zip(("Q", "K", "V", "DO"), qkv)}
    with loads.record(bufs) as ledger:
        from attnlab.launch_backward import launch_flash_backward

        o = torch.randn(B, H, T, D)
        launch_flash_backward(kernels, *qkv[:3], o, torch.randn(B, H, T), qkv[3], causal=True, block_m=16,
                              block_n=16)
    assert [(l.kernel, l.grid) for l in ledger.launches] == [
        ("_bwd_preprocess_kernel", (2, 1, 1)), ("_bwd_dkdv_kernel", (2, 1, 1)), ("_bwd_dq_kernel", (2, 1, 1))]
    dkdv = ledger.launches[1]
    # key tile 1 (keys 16..31), causal: one query tile (16..31), four products of 16 x 16 x 16
    shapes = sorted((d.m, d.n, d.k) for d in dkdv.dots if d.program == (1, 0, 0))
    assert shapes == [(16, 16, 16)] * 4 and sum(d.flops for d in dkdv.dots if d.program == (1, 0, 0)) == 4 * 2 * 16 ** 3
    # causal: key tile 0 walks query tiles 0 and 1, key tile 1 only its diagonal tile: one tl.load of Q each
    assert [a.program for a in dkdv.of("Q")] == [(0, 0, 0), (0, 0, 0), (1, 0, 0)]
    assert dkdv.busy() == set(dkdv.programs())


def test_every_memory_method_of_the_interpreter_is_accounted():
    """A Triton that adds a way to reach memory (a new descriptor or TMA load) is not silently trusted:
    every builder method named like a memory access is a primitive the ledger wraps or is known to
    route through one; anything else is wrapped as unaccounted and fails the check."""
    from triton.runtime.interpreter import interpreter_builder

    assert loads.memory_methods(interpreter_builder) == []
    for name in ("create_descriptor_load", "create_atomic_load", "create_load"):
        assert name in loads.ROUTED


def test_a_wild_atomic_read_is_switched_off():
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, interpreter_builder
    from triton._C.libtriton import ir

    buf = torch.zeros(4)
    with loads.record({"x": buf}) as ledger:
        interpreter_builder.set_grid_dim(1, 1, 1)
        interpreter_builder.set_grid_idx(0, 0, 0)
        ptrs, mask = _handles(buf, (0, 1 << 30), [True, True])
        zeros = TensorHandle(np.zeros(2, dtype=np.float32), tl.float32)
        interpreter_builder.create_atomic_rmw(ir.ATOMIC_OP.FADD, ptrs, zeros, mask, ir.MEM_SEMANTIC.RELAXED,
                                              None)
    assert ledger.strays == [((0, 0, 0), "atomic", 1)]


# ------------------------------------------------------------------------- shortcuts, rule named
SHORTCUTS = [
    ("04-atomic-passes", lambda k: check_softmax_kernel(k, n_rows=3, n_cols=37),
     r"program 0 read column 0 of its row 3 times"),
    ("04-atomic-read", lambda k: check_softmax_kernel(k, n_rows=3, n_cols=37),
     r"program 0 wrote into the input \(an atomic writes too\)"),
    ("05-atomic-two-pass", lambda k: check_flash_kernel(k, T=37, causal=True),
     r"one pass over the keys: program \(0, 0\) loaded key 0 of K 2 times"),
    ("05-one-key-no-dot", lambda k: check_flash_kernel(k, T=37, causal=True),
     r"compute S = QKᵀ and PV with tl\.dot.*program \(0, 0\) did 0% of the products"),
    ("05-dummy-dot", lambda k: check_flash_kernel(k, T=37, causal=True),
     r"compute S = QKᵀ and PV with tl\.dot.*program \(0, 0\) did 0% of the products.*\d+ more FLOPs of "
     r"tl\.dot went into results never stored to O, LSE"),
    ("07-causal-no-skip", lambda k: check_flash_backward_kernels(k, T=32, D=16, causal=True),
     r"notebook 07 asks the dK/dV program .* to walk the query tiles from the one holding its first key .*"
     r"program \(1, 0\) read 2\.0x the query rows of Q a causal key tile needs"),
    ("07-program-0-does-all", lambda k: check_flash_backward_kernels(k, T=32, D=16, causal=False),
     r"the dQ program .* to read only its own query rows of Q .*program \(0, 0\) read 16 other query row"),
    ("07-one-key-elementwise", lambda k: check_flash_backward_kernels(k, T=16, D=16, causal=True),
     r"the dQ program .* with tl\.dot.*program \(0, 0\) did 0% of the products"),
    ("07-dq-keyword-race", lambda k: check_flash_backward_kernels(k, T=32, D=16, causal=False),
     r"a race in _bwd_dkdv_kernel: program \(0, 0\) and program \(1, 0\) each load and then store the same "
     r"element \(a read-modify-write\) of DQ_ACC"),
    ("08-whole-slice-one-tile", lambda k: check_decode_partial_kernel(k, seqlens=[70], num_splits=1),
     r"notebook 08 asks .* to read K in tiles of at most 16 keys: program \(0, 0, 0\) read 64 keys in one access"),
    ("08-atomic-per-head-reload", lambda k: check_decode_partial_kernel(k, seqlens=[37], H_q=4, H_kv=1,
                                                                        num_splits=2),
     r"loaded once for the whole GQA group: program \(0, 0, 0\) loaded key \d+ of K 4 times"),
    ("08-atomic-past-seqlen", lambda k: check_decode_partial_kernel(k, seqlens=[40], num_splits=3),
     r"program \(0, 2, 0\) loaded K at positions 40\.\.47 of sequence 0, whose length is 40"),
]


def _kernel(mistake_id):
    nb = mistake_id[:2]
    return {"04": softmax_kernel, "05": flash_kernel, "07": backward, "08": decode}[nb](mistake_id)


@pytest.mark.parametrize("mistake_id,run,message", SHORTCUTS, ids=[s[0] for s in SHORTCUTS])
def test_shortcut_fails_with_the_rule_and_figure_named(mistake_id, run, message):
    with pytest.raises(AssertionError, match=message):
        run(_kernel(mistake_id))


def test_shortcuts_give_right_numbers_without_the_ledger(monkeypatch):
    """Each is a method failure, not a wrong number: with the ledger off they pass, so the ledger is
    what takes their points (on the main before issue 30, atomics and 07 were not accounted at all)."""
    monkeypatch.setattr("attnlab.verify.kernel_device", lambda device, **kw: ("cpu", False))
    monkeypatch.setattr("attnlab.verify_backward.kernel_device", lambda device, **kw: ("cpu", False))
    monkeypatch.setattr("attnlab.verify_decode.kernel_device", lambda device, **kw: ("cpu", False))
    monkeypatch.setattr("attnlab.verify_backward.stores_through_argument", lambda *a: False)
    for mistake_id, run, _ in SHORTCUTS:
        run(_kernel(mistake_id))


#: The dummy products of 05-dummy-dot, made to reach the output in name only: values the output does not
#: depend on (each an edit of that sample's loop).
_IN_NAME_ONLY = {
    "times-zero": "        acc = acc + 0.0 * junk_o\n",
    "rounded-away": "        acc = acc + 1e-30 * junk_o\n        l_i = l_i + 0.0 * tl.sum(junk_s, axis=1)\n",
    "cancelled": "        acc = acc + (junk_o - junk_o)\n",
    "zeros-into-acc": "        acc = tl.dot(tl.zeros([BLOCK_M, BLOCK_N], dtype=v.dtype), v, acc)\n",
}


@pytest.mark.parametrize("how", sorted(_IN_NAME_ONLY))
def test_a_product_the_output_does_not_depend_on_is_no_work(how, tmp_path):
    """Data flow alone would count a product added times zero, rounded away or cancelled: an operation
    whose result is exactly another operand's values passes nothing of the operand that did not matter."""
    import importlib.util
    import sys

    from .test_triton_method import ROOT, notebook_code

    sys.path.insert(0, str(ROOT / "samples" / "mistakes"))
    try:
        sample = importlib.import_module("05_triton_flash")
    finally:
        sys.path.remove(str(ROOT / "samples" / "mistakes"))
    body = sample._DUMMY_DOT_BODY.replace("        m_i = m_new\n", _IN_NAME_ONLY[how] + "        m_i = m_new\n")
    code = notebook_code("05_triton_flash").replace(sample._REF_BODY, body)
    path = tmp_path / f"in_name_only_{how.replace('-', '_')}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(AssertionError, match=r"did 0% of the products its tiles need through tl\.dot"):
        check_flash_kernel(mod._flash_fwd_kernel, T=37, causal=True)


# ----------------------------------------------------------------------- honest variants keep marks
def test_honest_backward_variants_pass():
    """Other tile sizes, ragged lengths, dQ by atomics in the dK/dV kernel."""
    for mistake_id in (None, "07-ok-dq-by-atomics"):
        kernels = backward(mistake_id)
        for case in (dict(T=64, D=16, causal=True, block_m=32, block_n=16),
                     dict(T=37, D=16, causal=True, block_m=16, block_n=32),
                     dict(T=49, B=2, H=1, D=16, causal=False, block_m=32, block_n=32)):
            check_flash_backward_kernels(kernels, **case)


@pytest.mark.parametrize("num_splits", [1, 2, 5, None])
def test_decoding_passes_with_any_split_count(num_splits):
    check_decode_partial_kernel(decode(), seqlens=[70, 9, 0], H_q=4, H_kv=2, T_q=2, num_splits=num_splits)


def test_flash_forward_passes_with_tiles_of_32():
    for causal in (False, True):
        check_flash_kernel(flash_kernel(), T=70, H=1, D=16, causal=causal, block_m=32, block_n=32)


def test_tiles_past_the_diagonal_loaded_masked_and_multiplied_fail(tmp_path):
    """Every key tile visited when causal, the loads masked at the tile's last row: nothing extra is
    read, but the products of the skipped tiles are computed; the FLOP cap of the model sees them."""
    import importlib.util

    from .test_triton_method import notebook_code

    code = notebook_code("05_triton_flash")
    for old, new in (("hi = tl.minimum(start_m + BLOCK_M, T)     # keys after the last row are never needed",
                      "hi = T"),
                     ("        key_ok = offs_n < T\n",
                      "        key_ok = offs_n < T\n        if CAUSAL:\n"
                      "            key_ok = key_ok & (offs_n < start_m + BLOCK_M)  # nothing past the tile read\n")):
        assert code.count(old) == 1
        code = code.replace(old, new)
    path = tmp_path / "masked_tiles.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    check_flash_kernel(mod._flash_fwd_kernel, T=37, D=16, causal=False)  # right, and the same work
    with pytest.raises(AssertionError, match=r"only on the tiles its method visits: program \(0, 0\) multiplied "
                                             r"3\.0x their FLOPs"):
        check_flash_kernel(mod._flash_fwd_kernel, T=37, D=16, causal=True)


def test_a_dq_kernel_that_also_adds_dq_acc_passes(tmp_path):
    """A dQ kernel written for both designs (it starts from DQ_ACC, zeros unless the dK/dV kernel added
    into it) reads only its own rows of DQ_ACC: honest, and it keeps its points."""
    import importlib.util

    from .test_triton_method import notebook_code

    old = "    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)\n"
    code = notebook_code("07_triton_backward")
    assert code.count(old) == 1
    code = code.replace(old, "    dq = tl.load(DQ_ACC + bh * stride_bh + q_offs, mask=row_ok[:, None], other=0.0)\n")
    path = tmp_path / "dq_from_acc.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    check_flash_backward_kernels((mod._bwd_preprocess_kernel, mod._bwd_dkdv_kernel, mod._bwd_dq_kernel),
                                 T=37, D=16, causal=True)
