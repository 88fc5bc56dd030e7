"""Red team 2: the tensor-core rule per product, not per kernel (issue: grades that follow the work).

The work ledger tags every loaded value with the tensor it came from and passes the tags through every
operation and product (:func:`attnlab.checking.flow.sources`), so each ``tl.dot`` is identified by its
operands (S = QKᵀ: a Q-only and a K-only operand, in either order), and counts its FLOPs on live lanes
only (:func:`attnlab.checking.flow.live_flops`: masked-off padding and zeros joined in multiply
nothing). Each product of 05/08 (S, PV) and 07 (S, dP, dV, dK, dQ) needs 90% of its own FLOPs through
``tl.dot`` (:class:`attnlab.checking.work_models.Product`).

- Each cheat loses the method tests with the product it faked named; each also kept them under the
  per-kernel rule (the rule switched off, it passes: the test can fail).
- Honest variants (other tile sizes, other loop orders, S transposed, dQ by atomics) keep passing.
- A zip bomb nested in an LMS export stops at the extraction budget.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import zipfile

import numpy as np
import pytest

from attnlab.checking import flow, loads, work_models
from attnlab.core import device
from attnlab.verify import check_flash_kernel
from attnlab.verify_backward import check_flash_backward_kernels
from attnlab.verify_decode import check_decode_partial_kernel

from .test_triton_method import ROOT, flash_kernel, notebook_code
from .test_work_ledger import backward, decode

RT = device.init(verbose=False)
interpreted = pytest.mark.skipif(not RT.interpret, reason="the work ledger runs under Triton's interpreter")


def _sample(name: str):
    sys.path.insert(0, str(ROOT / "samples" / "mistakes"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "samples" / "mistakes"))


def _module(tmp_path, notebook: str, edits, stem: str):
    code = notebook_code(notebook)
    for old, new in edits:
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    path = tmp_path / f"{stem}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flash(tmp_path, body: str, stem: str):
    sample = _sample("05_triton_flash")
    return _module(tmp_path, "05_triton_flash", ((sample._REF_BODY, body),), stem)._flash_fwd_kernel


def _backward_kernels(mod):
    return mod._bwd_preprocess_kernel, mod._bwd_dkdv_kernel, mod._bwd_dq_kernel


# -------------------------------------------------------------------------------- the pieces
def test_a_product_is_named_by_its_operands_in_either_order():
    s, pv = work_models.forward_products(np.zeros((1, 1, 1), dtype=np.int64))
    f = frozenset
    assert s.matches((f({"Q"}), f({"K"}))) and s.matches((f({"K"}), f({"Q"})))
    assert not s.matches((f({"Q"}), f({"Q"}))) and not s.matches((f({"Q", "K"}), f({"K"})))
    assert pv.matches((f({"Q", "K"}), f({"V"}))) and pv.matches((f({"V"}), f({"Q", "K"})))
    assert not pv.matches((f({"Q"}), f({"K"}))) and not pv.matches((f({"Q", "K", "V"}), f({"V"})))
    dk, dq = work_models.backward_products(("dK", "dQ"), np.zeros((1, 1, 1), dtype=np.int64))
    ds = f({"Q", "K", "V", "DO", "LSE", "DELTA"})
    assert dk.matches((ds, f({"Q"}))) and not dk.matches((ds, f({"K"})))
    assert dq.matches((f({"K"}), ds)) and not dq.matches((f({"Q", "K", "LSE"}), f({"K"})))  # P K is not dQ


def test_live_flops_leave_out_zero_padded_lanes():
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    a = np.ones((16, 32), dtype=np.float32)
    b = np.ones((32, 16), dtype=np.float32)
    whole = 2 * 16 * 16 * 32
    assert loads.live_flops(TensorHandle(a, tl.float32), TensorHandle(b, tl.float32)) == whole
    a[:, 16:] = 0  # the inner lanes 16..31 are padding in a
    assert loads.live_flops(TensorHandle(a, tl.float32), TensorHandle(b, tl.float32)) == whole // 2
    b[:, 8:] = 0   # and the columns 8..15 of b
    assert loads.live_flops(TensorHandle(a, tl.float32), TensorHandle(b, tl.float32)) == whole // 4
    derived = TensorHandle(a, tl.float32)  # an operand derived from a product (P) is taken whole
    setattr(derived, flow.FLOW_ATTR, object())
    assert loads.live_flops(derived, TensorHandle(b, tl.float32)) == whole // 2


# ------------------------------------------------------------------------------ the cheats
_CHEATS = {
    "05-padded-dot": (lambda m: flash_kernel(m), check_flash_kernel, "P V", dict(T=37)),
    "07-repeated-product": (lambda m: backward(m), check_flash_backward_kernels, "dK = dSᵀ Q", dict(T=37, D=16)),
}


@interpreted
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cheat", sorted(_CHEATS))
def test_each_cheat_loses_the_product_it_faked(cheat, causal):
    get, check, product, case = _CHEATS[cheat]
    with pytest.raises(AssertionError, match=rf"did 0% of the product {product} through tl\.dot"):
        check(get(cheat), causal=causal, **case)


@interpreted
@pytest.mark.parametrize("cheat", sorted(_CHEATS))
def test_each_cheat_kept_its_points_under_the_per_kernel_rule(cheat, monkeypatch):
    """Without the per-product rule (the per-kernel share only, as before), each cheat passes: the rule
    above is what rejects it, and that test can fail."""
    get, check, _, case = _CHEATS[cheat]
    monkeypatch.setattr(work_models, "check_products", lambda *a: None)
    check(get(cheat), causal=True, **case)


# PV on half the key tiles through a tl.dot whose inner lanes are every other one masked-off padding (twice the
# FLOPs of those tiles' PV), on the other half element-wise: PV's FLOPs through tl.dot add up to all it needs.
_PV_PADDED = """        if (start_n // BLOCK_N) % 2 == 0:
            offs_w = tl.arange(0, 2 * BLOCK_N)
            rows_w = start_n + offs_w // 2  # each key twice: once as data, once masked off
            v_w = tl.load(V + rows_w[:, None] * stride_t + offs_d[None, :],
                          mask=(offs_w[:, None] % 2 == 0) & (rows_w[:, None] < T), other=0.0)
            p_w = tl.reshape(tl.join(p, tl.zeros_like(p)), (BLOCK_M, 2 * BLOCK_N))
            pv = tl.dot(p_w, v_w)
        else:
            v = tl.load(V + kv_offs, mask=offs_n[:, None] < T, other=0.0)
            pv = tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        acc = acc * alpha[:, None] + pv
"""


def _pv_padded_body():
    body = _sample("05_triton_flash")._SINGLE_PHASE_BODY
    for old, new in (("        v = tl.load(V + kv_offs, mask=offs_n[:, None] < T, other=0.0)\n", ""),
                     ("        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n", _PV_PADDED)):
        assert body.count(old) == 1
        body = body.replace(old, new)
    return body


@interpreted
def test_pv_through_a_zero_padded_dot_counts_its_live_lanes_only(tmp_path, monkeypatch):
    kernel = _flash(tmp_path, _pv_padded_body(), "pv_padded")
    with pytest.raises(AssertionError, match=r"of the product P V through tl\.dot .*zero-padded lanes"):
        check_flash_kernel(kernel, T=64, H=1, D=16, causal=False)
    # every lane counted (padding included), the same kernel passes: the live lanes are what reject it
    monkeypatch.setattr(loads, "live_flops", lambda a, b: -1)
    check_flash_kernel(kernel, T=64, H=1, D=16, causal=False)


@interpreted
def test_a_product_faked_from_the_wrong_operands_is_not_the_product(tmp_path):
    """dK's tl.dot given Pᵀ instead of dSᵀ (dS element-wise added after): its operands make it no product."""
    sample = _sample("07_triton_backward")
    fake = sample._DKDV_SRC.replace(
        "    dk = tl.dot(ds_t.to(q.dtype), q, dk)",
        "    dk = tl.dot(p_t.to(q.dtype), q, dk) + tl.sum((ds_t - p_t)[:, :, None] * q[None, :, :], axis=1)")
    mod = _module(tmp_path, "07_triton_backward", ((sample._DKDV_SRC, fake),), "faked_dk")
    with pytest.raises(AssertionError, match=r"did 0% of the product dK = dSᵀ Q .*other operands"):
        check_flash_backward_kernels(_backward_kernels(mod), T=37, D=16, causal=False)


# ------------------------------------------------------------------------- honest variants
@interpreted
@pytest.mark.parametrize("blocks", [(32, 16), (16, 32)])
def test_honest_forward_variants_keep_their_points(blocks):
    block_m, block_n = blocks
    for mistake_id in (None, "05-ok-reversed-tiles", "05-ok-single-phase-exp"):
        for causal in (False, True):
            check_flash_kernel(flash_kernel(mistake_id), T=37, H=1, D=16, causal=causal, block_m=block_m,
                               block_n=block_n)


@interpreted
def test_honest_forward_with_s_transposed_keeps_its_points(tmp_path):
    """S as (K Qᵀ)ᵀ: the product is named by its operands, not their order."""
    body = _sample("05_triton_flash")._SINGLE_PHASE_BODY.replace(
        "        s = tl.dot(q, tl.trans(k)) * scale\n", "        s = tl.trans(tl.dot(k, tl.trans(q))) * scale\n")
    kernel = _flash(tmp_path, body, "s_transposed")
    check_flash_kernel(kernel, T=37, H=1, D=16, causal=True, block_m=16, block_n=32)


# The dK/dV program walking its query tiles from the last to the first, in one always-masked loop.
_DKDV_WALK = """    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
    else:
        lo = 0
    n_tiles = tl.cdiv(T - lo, BLOCK_M)
    for i in range(0, n_tiles):
        start_m = lo + (n_tiles - 1 - i) * BLOCK_M  # last query tile first
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m, offs_n, stride_t, T, qk_scale,
                            True, CAUSAL, BLOCK_M, HEAD_DIM)
"""


@interpreted
@pytest.mark.parametrize("blocks", [(32, 16), (16, 32)])
def test_honest_backward_variants_keep_their_points(blocks, tmp_path):
    block_m, block_n = blocks
    src = _sample("07_triton_backward")._DKDV_SRC
    loops = src[src.index("    # Query tiles [lo, mid)"):src.index("    dk = dk * scale")]
    reversed_walk = _backward_kernels(_module(tmp_path, "07_triton_backward", ((loops, _DKDV_WALK),),
                                              f"dkdv_reversed_{block_m}_{block_n}"))
    for kernels in (backward(), backward("07-ok-dq-by-atomics"), reversed_walk):
        for causal in (False, True):
            check_flash_backward_kernels(kernels, T=37, D=16, causal=causal, block_m=block_m, block_n=block_n)


@interpreted
@pytest.mark.parametrize("block_n", [16, 32])
def test_honest_decoding_keeps_its_points(block_n):
    check_decode_partial_kernel(decode(), seqlens=[37, 5], H_q=4, H_kv=2, T_q=2, block_n=block_n, num_splits=2)


# ------------------------------------------------------------------------ bounded extraction
def _zip(path, members: dict, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _bomb(tmp_path, mib: int = 8):
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.ipynb", b"\0" * (mib * 2**20))  # a few KiB compressed
    return _zip(tmp_path / "export.zip", {"ann_1_assignsubmission_file_/01_online_softmax.ipynb": b"{}",
                                          "bob_2_assignsubmission_file_/upload.zip": inner.getvalue()})


def test_a_nested_zip_bomb_stops_at_the_budget_naming_the_archive(tmp_path):
    from attnlab.grading.host.collect import ExtractionLimit, extract_bounded

    bomb = _bomb(tmp_path)
    assert bomb.stat().st_size < 64 * 2**10
    with pytest.raises(ExtractionLimit, match=r"export\.zip > bob_2_assignsubmission_file_/upload\.zip: unpacking "
                                              r"zeros\.ipynb passes 4 MiB uncompressed"):
        extract_bounded(bomb, tmp_path / "out", max_bytes=4 * 2**20)
    written = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written <= 4 * 2**20 + 2**20  # stopped within one chunk of the limit, not after 8 MiB
    extract_bounded(bomb, tmp_path / "roomy", max_bytes=16 * 2**20)  # the same export under a larger budget
    assert (tmp_path / "roomy" / "export" / "bob_2_assignsubmission_file_" / "upload" / "zeros.ipynb").stat().st_size \
        == 8 * 2**20


def test_members_and_depth_are_bounded_too(tmp_path):
    from attnlab.grading.host.collect import ExtractionLimit, extract_bounded

    many = _zip(tmp_path / "many.zip", {f"s_{i}/x.ipynb": b"{}" for i in range(50)})
    with pytest.raises(ExtractionLimit, match=r"many\.zip: more than 20 members"):
        extract_bounded(many, tmp_path / "a", max_members=20)
    extract_bounded(many, tmp_path / "b", max_members=50)
    data = b"{}"
    for level in range(4):  # a zip in a zip in a zip...
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(f"level{level}.zip" if level else "nb.ipynb", data)
        data = buf.getvalue()
    deep = tmp_path / "deep.zip"
    deep.write_bytes(data)
    with pytest.raises(ExtractionLimit, match=r"nested more than 2 deep"):
        extract_bounded(deep, tmp_path / "c", max_depth=2)
    extract_bounded(deep, tmp_path / "d", max_depth=3)


def test_bounded_extraction_lays_out_an_honest_export_as_nbgrader_does(tmp_path):
    from nbgrader.utils import unzip

    from attnlab.grading.host.collect import extract_bounded

    def export(path, escape: bool):
        inner = io.BytesIO()
        with zipfile.ZipFile(inner, "w") as z:
            z.writestr("attention_kernels/05_triton_flash.ipynb", b"{}")
            if escape:  # climbs out: skipped (nbgrader's own unzip refuses the whole export)
                z.writestr("../../escape.ipynb", b"{}")
        return _zip(path, {"Wei Zhang_1003_assignsubmission_file_/work.zip": inner.getvalue(),
                           "Wei Zhang_1003_assignsubmission_file_/01_online_softmax.ipynb": b"{}"})

    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    extract_bounded(export(tmp_path / "export.zip", True), tmp_path / "ours")
    unzip(str(export(tmp_path / "theirs.zip", False)), str(tmp_path / "theirs"), create_own_folder=True, tree=True)
    files = lambda root: sorted(str(p.relative_to(root)).split("/", 1)[1] for p in root.rglob("*.ipynb"))  # noqa: E731
    assert files(tmp_path / "ours") == files(tmp_path / "theirs") and len(files(tmp_path / "ours")) == 2
    assert not list(tmp_path.rglob("escape.ipynb"))


@pytest.mark.slow
def test_collect_refuses_a_nested_bomb_naming_it(tmp_path, monkeypatch):
    from attnlab.grading.host import collect
    from attnlab.grading.host.collect import ExtractionLimit

    from .conftest import copy_course

    from attnlab.grading.course import Course

    c = copy_course(tmp_path / "course")
    args = []
    real = Course.nbgrader

    def nbgrader(self, *a, **kw):  # a budget of 4 MiB for this export
        args.extend(a)
        return real(self, *a, "--BoundedExtractor.max_bytes=4194304", **kw)
    monkeypatch.setattr(Course, "nbgrader", nbgrader)
    with pytest.raises(ExtractionLimit, match=r"upload\.zip: unpacking zeros\.ipynb passes 4 MiB"):
        collect.collect_zip(c, _bomb(tmp_path))
    assert "--extractor=attnlab.grading.host.collect.BoundedExtractor" in args


def test_an_operand_that_changes_nothing_passes_no_sources():
    """``p + 1e-30 * dp`` and ``0 * dp`` are not dS (no DO, V of theirs passes on); ``P * (dP - Δ)`` where P
    underflowed to 0 still is."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def h(values, *names):
        t = TensorHandle(np.asarray(values, dtype=np.float32), tl.float32)
        return flow.mark_sources(t, frozenset(names)) if names else t

    def op(fn, *args):
        out = TensorHandle(fn(*(a.data for a in args)).astype(np.float32), tl.float32)
        flow.pass_sources(args, {}, out)
        return flow.sources(out)

    p, dp = h([0.5, 0.25], "Q", "K"), h([1.0, 2.0], "DO", "V")
    assert op(lambda a, b: a + b, p, h([1e-30, 2e-30], "DO", "V")) == {"Q", "K"}  # rounded away
    assert op(lambda a, b: a * b, h([0.0, 0.0]), dp) == frozenset()                 # times a constant zero
    assert op(lambda a, b: a * b, p, dp) == {"Q", "K", "DO", "V"}                   # the honest dS
    assert op(lambda a, b: a * b, h([0.0, 0.0], "Q", "K"), dp) == {"Q", "K", "DO", "V"}  # P underflowed
