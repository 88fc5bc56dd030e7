"""The given launchers' fast path (issue 34, item 1).

Outside :func:`attnlab.launch.checking`, a launcher called on GPU tensors must never hand a tensor's
value to the host (the host would wait for the GPU, and a CUDA graph could not be captured) and
must not fill its outputs with NaN (a kernel per output, for a check nobody makes). Inside
``checking()`` (every checker's call of learner code, the timing stage) it poisons and validates as
before. On a CPU there is no GPU: the tests treat CPU tensors as a GPU's by emptying
``launch.HOST_DEVICES`` and watch every aten operation the launcher's Python runs; the kernels'
launches are recorded, not run (``gpu_compile.captured``), since Triton's interpreter reads every
tensor on the host by design.

On a GPU, :func:`test_launcher_replays_from_a_cuda_graph` captures each given launcher in a CUDA graph,
replays it on new inputs and compares with PyTorch.
"""

from __future__ import annotations

import pytest
import torch
import triton.language as tl  # noqa: F401 (the no-op kernel's annotations are read from this module's globals)
from torch.utils._python_dispatch import TorchDispatchMode

from attnlab import gpu_compile, launch, launch_backward, launch_decode, launch_tuning

from .test_launcher_strides import _QKV, _backward_inputs, _bwd, _dec, _decode_inputs, _fwd, _qkv, _randn, _softmax

#: aten operations that give the host a tensor's value (``int(t)``, ``bool(t)``, ``t.item()``, ``if t.any():``).
HOST_READS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal", "aten::item"}
#: aten operations that fill a tensor with one value (the NaN poison).
FILLS = {"aten::fill_", "aten::full", "aten::full_like"}


class Watch(TorchDispatchMode):
    """Records the name of every aten operation that runs inside it."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))

    def reads(self) -> list[str]:
        return [op for op in self.ops if op in HOST_READS]

    def fills(self) -> list[str]:
        return [op for op in self.ops if op in FILLS]


def _no_host_copy(name):
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"Tensor.{name} hands the tensor's values to the host")
    return refuse


def _tuned_noop():
    import triton

    @triton.jit
    def noop(Q, K, V, O, LSE, QS, KS, T, BH, n_programs, sm_scale, CAUSAL: tl.constexpr,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr,
             WARP_SPEC: tl.constexpr, PERSISTENT: tl.constexpr):
        pass  # notebook 09's signature: what is watched is the launcher's Python

    return noop


def _attention(p):
    q, k, v = (p(t).requires_grad_() for t in _qkv())
    o = launch_backward.attention_function(_bwd)(q, k, v, causal=True)
    return torch.autograd.grad(o, (q, k, v), p(_randn(*_QKV, seed=9)))


#: the six given launchers, as the notebooks call them (``p`` places an input tensor)
LAUNCHERS = {
    "triton_softmax": lambda p: launch.launch_softmax(_softmax(), p(_randn(6, 37))),
    "triton_flash_attention": lambda p: launch.launch_flash_forward(
        _fwd(), *(p(t) for t in _qkv()), causal=True, block_m=16, block_n=16),
    "triton_flash_attention_backward": lambda p: launch_backward.launch_flash_backward(
        _bwd(), *(p(t) for t in _backward_inputs()), causal=True, block_m=16, block_n=16),
    "triton_attention": _attention,
    "flash_decode": lambda p: launch_decode.launch_flash_decode(*_dec(), *(p(t) for t in _decode_inputs()),
                                                                num_splits=2),
    "launch_tuned_forward": lambda p: launch_tuning.launch_tuned_forward(
        _tuned_noop(), *(p(_randn(1, 2, 128, 16, seed=i)) for i in range(3)), config=dict(BLOCK_M=64, BLOCK_N=64)),
}


def _watched(name, monkeypatch, check: bool):
    """Run launcher ``name`` on CPU tensors treated as a GPU's; the operations of its Python."""
    monkeypatch.setattr(launch, "HOST_DEVICES", ())
    for method in ("tolist", "numpy", "__array__"):
        monkeypatch.setattr(torch.Tensor, method, _no_host_copy(method))
    # launch_tuned_forward runs its (no-op) kernel: on a GPU host it must get tensors on the GPU
    on_gpu = name == "launch_tuned_forward" and not launch_tuning.runtime().interpret
    inputs = (lambda t: t.cuda()) if on_gpu else (lambda t: t)  # noqa: E731
    with gpu_compile.captured() as launches:
        watch = Watch()
        if check:
            with launch.checking(), watch:
                LAUNCHERS[name](inputs)
        else:
            with watch:
                LAUNCHERS[name](inputs)
    return watch, launches


@pytest.mark.parametrize("name", LAUNCHERS)
def test_fast_path_reads_no_value_and_fills_nothing(name, monkeypatch):
    # the launch of notebook 09's launcher is not gated (it runs, a no-op kernel), the others are recorded
    watch, launches = _watched(name, monkeypatch, check=False)
    assert not watch.reads(), f"{name} read a tensor's value on the host: {watch.reads()}"
    assert not watch.fills(), f"{name} filled a buffer outside checking(): {watch.fills()}"
    if name != "launch_tuned_forward":
        assert launches, f"{name} launched nothing"


@pytest.mark.parametrize("name", LAUNCHERS)
def test_checking_poisons_the_outputs(name, monkeypatch):
    watch, _ = _watched(name, monkeypatch, check=True)
    assert watch.fills(), f"{name} did not NaN-fill its outputs inside checking()"
    if name == "flash_decode":
        assert watch.reads(), "flash_decode did not check the lengths' range inside checking()"


@pytest.mark.parametrize("bad", [[25, 7], [20, -1]])
def test_bad_lengths_raise_as_before_on_the_cpu_and_when_checking(bad, monkeypatch):
    q, k, v, _ = _decode_inputs()
    lens = torch.tensor(bad, dtype=torch.int32)
    message = rf"flash_decode: cache_seqlens must lie in \[0, T_max=24\], got values from {min(bad)} to {max(bad)}"
    with pytest.raises(ValueError, match=message):
        launch_decode.launch_flash_decode(*_dec(), q, k, v, lens, num_splits=2)
    monkeypatch.setattr(launch, "HOST_DEVICES", ())
    with gpu_compile.captured(), launch.checking(), pytest.raises(ValueError, match=message):
        launch_decode.launch_flash_decode(*_dec(), q, k, v, lens, num_splits=2)
    with gpu_compile.captured() as launches:  # the fast path on a GPU does not read them
        launch_decode.launch_flash_decode(*_dec(), q, k, v, lens, num_splits=2)
    assert len(launches) == 2


def test_other_bad_input_still_raises_in_the_fast_path(monkeypatch):
    monkeypatch.setattr(launch, "HOST_DEVICES", ())
    q, k, v, lens = _decode_inputs()
    with pytest.raises(TypeError, match="cache_seqlens must be an int32 tensor of shape"):
        launch_decode.launch_flash_decode(*_dec(), q, k, v, lens.long(), num_splits=2)
    with pytest.raises(ValueError, match="H_q=4 query heads must be a multiple of H_kv=3"):
        launch_decode.launch_flash_decode(*_dec(), q, k[:, :1].repeat(1, 3, 1, 1), v[:, :1].repeat(1, 3, 1, 1),
                                          lens, num_splits=2)
    with pytest.raises(ValueError, match="block_m=24 must be a power of two"):
        launch.launch_flash_forward(_fwd(), *_qkv(), block_m=24)


# ------------------------------------------------------------------------------- on a GPU only
def _graph_cases():
    """name -> (make inputs from a generator, run the launcher, expected output from the inputs)."""
    import torch.nn.functional as F

    dev, bf = "cuda", torch.bfloat16

    def randn(g, *shape, dtype=bf):
        return torch.randn(*shape, generator=g, device=dev).to(dtype)

    def flat(ts):
        return torch.cat([t.float().flatten() for t in ts])

    def grads(q, k, v, do, fn):
        qkv = [t.detach().requires_grad_() for t in (q, k, v)]
        return flat(torch.autograd.grad(fn(*qkv), qkv, do))

    def bwd_inputs(g):
        q, k, v, do = (randn(g, 2, 4, 256, 64) for _ in range(4))
        return (q, k, v, *launch_backward.reference_forward(q, k, v, causal=True), do)

    def decode_inputs(g):
        return (randn(g, 1, 32, 1, 128), randn(g, 1, 8, 4096, 128), randn(g, 1, 8, 4096, 128),
                torch.full((1,), 4000, dtype=torch.int32, device=dev))

    def sdpa_decode(q, k, v, lens):
        k, v = (t[:, :, :4000].repeat_interleave(4, 1) for t in (k, v))
        return F.scaled_dot_product_attention(q, k, v)

    def causal_sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    attention = launch_backward.attention_function(_bwd)
    tuned = _tuned_kernel()
    return {
        "triton_softmax": (lambda g: (randn(g, 512, 1000, dtype=torch.float32),),
                           lambda x: launch.launch_softmax(_softmax(), x), lambda x: torch.softmax(x, -1)),
        "triton_flash_attention": (lambda g: tuple(randn(g, 2, 4, 256, 64) for _ in range(3)),
                                   lambda q, k, v: launch.launch_flash_forward(_fwd(), q, k, v, causal=True)[0],
                                   causal_sdpa),
        "triton_flash_attention_backward": (
            bwd_inputs, lambda q, k, v, o, lse, do: flat(launch_backward.launch_flash_backward(
                _bwd(), q, k, v, o, lse, do, causal=True)),
            lambda q, k, v, o, lse, do: grads(q, k, v, do, causal_sdpa)),
        "triton_attention": (
            lambda g: tuple(randn(g, 2, 4, 256, 64) for _ in range(4)),
            lambda q, k, v, do: grads(q, k, v, do, lambda *t: attention(*t, causal=True)),
            lambda q, k, v, do: grads(q, k, v, do, causal_sdpa)),
        "flash_decode": (decode_inputs, lambda q, k, v, lens: launch_decode.launch_flash_decode(
            *_dec(), q, k, v, lens)[0], sdpa_decode),
        "launch_tuned_forward": (
            lambda g: tuple(randn(g, 2, 4, 256, 64) for _ in range(3)),
            lambda q, k, v: launch_tuning.launch_tuned_forward(
                tuned, q, k, v, causal=True, config=dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3))[0],
            causal_sdpa),
    }


def _tuned_kernel():
    """Notebook 09's tuned forward kernel ``_attn_fwd_tuned`` (its given cell ``tuned-kernel``), imported
    from a file: ``@triton.jit`` reads a kernel's source from its file."""
    import importlib.util
    import tempfile
    from pathlib import Path

    import jupytext

    from .conftest import ROOT
    from .test_bug_hints import _HEADER

    nb = jupytext.read(ROOT / "notebooks" / "09_tuning_and_fp8.py")
    src = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tuned-kernel")
    path = Path(tempfile.mkdtemp(prefix="attnlab-fastpath-"), "tuned_kernel.py")
    path.write_text(_HEADER + src)
    spec = importlib.util.spec_from_file_location("tuned_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._attn_fwd_tuned


def replay_check(name: str, seed: int = 0) -> float:
    """Capture launcher ``name`` in a CUDA graph, replay it on two new draws of the inputs (copied into
    the captured ones) and return the largest relative error against PyTorch. Raises what capturing raises."""
    make, run, expected = _graph_cases()[name]
    g = torch.Generator(device="cuda").manual_seed(seed)
    static = make(g)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # compile, autotune and allocate outside the capture
        for _ in range(2):
            run(*static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run(*static)
    worst = 0.0
    for _ in range(2):
        for dst, src in zip(static, make(g)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        ref = expected(*static).float()
        worst = max(worst, float((out.float() - ref).norm() / ref.norm()))
    return worst


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_replays_from_a_cuda_graph(name, monkeypatch):
    monkeypatch.setattr(gpu_compile, "TARGETS", ())  # the gate compiles for this GPU only: capturing is the point
    assert replay_check(name) < 2e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", [n for n in LAUNCHERS if n != "launch_tuned_forward"])
def test_compile_only_compiles_each_launch_and_runs_no_kernel_on_the_gpu(name, monkeypatch):
    """What the timing worker's compile pass relies on, compiled on a real GPU: inside ``compile_only`` the
    launcher's kernels are compiled and never run (its outputs stay as poisoned), and outside it the same
    call gives the right numbers. (Notebook 09's tuned launcher launches its autotuned kernel itself, not
    through the gate, so ``compile_only`` does not apply to it; 09 has no timing stage. Seen on the H200.)"""
    monkeypatch.setattr(gpu_compile, "TARGETS", ())
    make, run, expected = _graph_cases()[name]
    inputs = make(torch.Generator(device="cuda").manual_seed(1))
    with gpu_compile.compile_only(), launch.checking():
        out = run(*inputs)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), name
    out, ref = run(*inputs).float(), expected(*inputs).float()
    assert float((out - ref).norm() / ref.norm()) < 2e-2, name
