"""Watch how learner code computes, not only what it returns: a ``TorchDispatchMode`` probe.

Notebooks 01-03 teach a method (one pass over blocks; tiles instead of a score matrix; the
backward formulas instead of autograd). Right numbers can come from a shortcut, so the checkers
run each call of learner code under a :class:`MethodProbe`, which sees every aten operator the
call executes (below autograd, after composite operators are decomposed) and records the first
operator that breaks the notebook's rule:

- ``reduce_limit`` (notebook 01): no reduction, scan or contraction combines more than this many
  elements per output (the input must be read block by block, so at most a block of every row);
- ``reduce_limit`` (notebooks 02, 03): no more than one tile's side or one head dimension per output
  (``max(block_k, D)``; the backward also ``block_q``): a softmax, max, sum or product over all keys
  of a row (or all queries of a column) skips the tiles even when no score matrix is ever held;
- ``one_pass`` (notebook 01): the input is read once, block after block: reading elements again
  after moving on from them (a second loop over the blocks, for the sum after the max; a copy of
  all of x after the first block) is a second pass. A copy of the whole input made before
  (``x.to(float32)``) counts as the input; any block order is one pass;
- ``size_limit`` (02, 03): no floating-point tensor of this many elements or more is produced
  (one head's T_q x T_k score matrix, when that is larger than every tile and every input);
- always: no fused attention operator (``scaled_dot_product_attention`` and its flash, efficient,
  cuDNN and math kernels);
- ``autograd`` (03): ``"forbid"``: no operator may run inside autograd's backward (the learner's
  function must apply the formulas itself, not call ``torch.autograd.grad``/``.backward()``/
  ``torch.func.vjp``); ``"own_node"``: the learner's function runs as the backward of a given
  ``autograd.Function``, and only autograd's built-in nodes (``MmBackward0``...) are refused;
  operators outside any backward (the given forward) are not checked.

It also keeps the storage of every tensor an operator produced (for the duration of one call; the
checks' sizes are small): a result the probe never saw being made (NumPy, or dispatch switched
off) cannot be judged, and is flagged for review. So is a result that carries such data on (an
operator's output is "foreign" when an input of more than one element was: ``torch.from_numpy(r)
.clone()``, a tensor made in another thread, whose dispatch the probe does not see, or made before
the call), and a result written after the last operator the probe saw write it (its version
counter moved on: a ``copy_`` from another thread).

Overhead: a Python dispatch mode costs about 25 µs per aten operator on a CPU (a T = 37 backward
in tiles of 7: 1293 operators, 2.9 ms plain, 39 ms under an empty mode, 45 ms under this probe),
so the checks keep their cases small and skip the probe where no rule can decide.
"""
# Length: One job, long: the dispatch-mode probe and the rules of each notebook's method, which
# read the same operator table.

from __future__ import annotations

import math
import re
from types import MappingProxyType  # read-only: a cell cannot edit the rules in place

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["MethodProbe", "reduce_rule", "row_rule", "tile_rule"]

#: Substrings of aten operator names that compute attention in one fused call.
ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention",
                 "multi_head_attention", "fused_sdp", "transformer_encoder", "_triton_multi_head")
#: Operators that combine elements along one ``dim`` argument without shrinking their output.
_SCANS = frozenset({"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "sort", "argsort", "_softmax",
          "_log_softmax", "_safe_softmax", "softmax", "log_softmax"})
#: Matrix products: the contraction length is the last dim of the first operand (``addmm``: second).
_PRODUCTS = MappingProxyType({"mm": 0, "bmm": 0, "mv": 0, "dot": 0, "vdot": 0, "addmm": 1, "baddbmm": 1, "addbmm": 1,
             "addmv": 1, "_addmm_activation": 1})
#: Operators that accumulate source elements into the places an index names: how many can land on one
#: output is bounded by the index's length along ``dim`` (scatter) or the whole index (index_add).
_SCATTERS = frozenset({"scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"})
_INDEX_ADDS = frozenset({"index_add", "index_add_", "index_reduce", "index_reduce_"})
_PUTS = frozenset({"index_put", "index_put_", "_index_put_impl_", "put", "put_"})
#: Operators whose output can be as large as their input yet each output combines a whole dimension
#: (``dim`` argument at position 1 or 2: topk's is third), the whole transform, or a window.
_ALONG_DIM = MappingProxyType({"topk": 2, "kthvalue": 2, "median": 1, "nanmedian": 1, "mode": 1, "msort": None,
                               "unique_dim": 1, "unique_consecutive": 3})
#: Operators whose every output may depend on every input element (a red team read a row's max off
#: torch.unique's sorted values and its inverse indices).
_WHOLE = frozenset({"unique", "_unique", "_unique2"})
_FFTS = frozenset({"_fft_r2c", "_fft_c2c", "_fft_c2r"})
_WINDOWS = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
                      "mkldnn_convolution"})
_POOLS = frozenset({"max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
                    "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d", "lp_pool1d", "lp_pool2d",
                    "fractional_max_pool2d", "fractional_max_pool3d"})
#: Pools sized by their output: a window spans input / output along each pooled (trailing) dim, so an
#: output as large as the input can still cover a whole row (a red team pooled rows of shape 1 x n to n x 1).
_ADAPTIVE = frozenset({"adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_avg_pool1d",
                       "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d"})
_BAGS = frozenset({"embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"})
#: Operators whose output is smaller than an input without combining elements (selection, factories).
_SELECTIONS = frozenset({"index", "index_select", "gather", "take", "masked_select", "nonzero", "new_zeros",
               "new_ones", "new_full", "new_empty", "new_empty_strided", "_local_scalar_dense",
               "set_", "resize_", "argwhere", "narrow_copy", "slice_copy",
               "select_copy", "diagonal_copy", "split_with_sizes_copy", "unbind_copy", "lift_fresh_copy",
               "lift_fresh", "as_strided_copy", "_to_copy", "copy_", "copy", "clone", "detach", "alias"})
#: Operators that copy values unchanged (a whole copy stands for the input it copies).
_COPIES = frozenset({"_to_copy", "clone", "copy", "copy_", "contiguous", "detach_copy", "alias_copy"})
#: Operators that read a tensor's shape, dtype or device but none of its values.
_NO_VALUES = frozenset({"result_type", "empty", "empty_strided", "is_same_size", "_has_same_storage_numel",
                        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset"})
#: autograd's own backward nodes are named after the operator, with a version digit ("MmBackward0").
_BUILTIN_NODE = re.compile(r"Backward\d+$")


def _facts(func) -> tuple[str, bool, bool, int]:
    """(operator name, is a view, is fused attention, writes its inputs: 1 or 0) of an OpOverload,
    once per probe and operator."""
    name = func.overloadpacket.__name__
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)
    return name, bool(func.is_view), any(s in name for s in ATTENTION_OPS), int(writes)


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors_in(v)


def _reads_no_values(name: str) -> bool:
    """Whether an operator reads only its inputs' shape, dtype or device (``q.new_ones``, ``zeros_like``)."""
    return name.startswith("new_") or name.endswith("_like") or name in _NO_VALUES


def _storage(t: torch.Tensor) -> int:
    """The address of ``t``'s storage; 0 when it has none to follow (an empty or a sparse tensor)."""
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 (a tensor without storage: nothing to track)
        return 0


class MethodProbe(TorchDispatchMode):
    """Record the first operator that breaks a notebook's method rule (see the module docstring).

    Args:
        rule: what the notebook asks for, as the start of every message ("notebook 02 asks for tiles").
        hint: how to comply, appended to the message.
        size_limit: smallest floating-point tensor (elements) that counts as a score matrix; None: off.
        size_what: how such a tensor is described ("a whole score matrix (T_q x T_k = 64 x 64)").
        reduce_limit: most elements one reduction may combine per output; None: off.
        autograd: None, ``"forbid"`` or ``"own_node"`` (see the module docstring).
        inputs: the tensors passed to the learner (their storage counts as seen).
        where: the check and its case, the start of every message.

    After the ``with`` block, :meth:`verdict` raises ``AssertionError`` naming the rule and the
    operator, or returns normally.
    """

    def __init__(self, *, rule: str, hint: str = "", size_limit: int | None = None, size_what: str = "",
                 reduce_limit: int | None = None, autograd: str | None = None, inputs=(), where: str = "",
                 one_pass: bool = False, reduce_scalars: bool | int = True):
        super().__init__()
        self.rule = f"{where}: {rule}" if where else rule
        self.where = where
        self.hint = hint
        self.size_limit, self.size_what = size_limit, size_what
        self.reduce_limit, self.autograd = reduce_limit, autograd
        # True: a reduction to one number counts like any other; an int N: N of them may exceed the limit
        self.reduce_scalars = reduce_scalars is True
        self.scalar_limit = 0 if reduce_scalars is True else int(reduce_scalars)
        self.scalar_budget = self.scalar_limit
        self._violation: str | None = None  # write-once, through _violate (the property has no setter)
        self._internal: str | None = None   # write-once: the probe's own first error (see ``internal_error``)
        self.ops = 0
        self.seen = {_storage(t): t for t in tensors_in(tuple(inputs)) if _storage(t)}
        self.foreign: dict[int, object] = {}   # storages holding data from outside the probe's view
        self._constant: set[int] = set()       # storages made from no input data (see the size rule)
        self.versions: dict[int, int] = {}     # storage -> version counter after the last write seen
        self._facts: dict = {}
        # one_pass: storage -> (source, the storage offset of the source's element 0, its shape); per
        # source, the elements read last and those left behind (read, then moved on from)
        self.one_pass = one_pass
        self._sources: dict[int, tuple] = {}
        self._last: dict[int, object] = {}
        self._left: dict[int, object] = {}
        for i, t in enumerate(tensors_in(tuple(inputs))):
            if one_pass and _storage(t) and t.is_contiguous():
                self._sources[_storage(t)] = (i, t.storage_offset(), tuple(t.shape))
                self._left[i] = np.zeros(t.numel(), dtype=bool)
        self._attached = False
        self._sealed = True  # from here on the rules cannot be changed (see __setattr__)

    def attach(self) -> None:
        """Become active (push this mode), unless already active; for use from autograd hooks."""
        if not self._attached:
            self._attached = True
            self.__enter__()

    def detach(self) -> None:
        """Stop being active, if :meth:`attach` made it so."""
        if self._attached:
            self._attached = False
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

            # when the hooked backward raises, autograd's engine restores the thread's dispatch state
            # itself and this mode is already gone: popping again would raise over the learner's error
            if any(m is self for m in _get_current_dispatch_mode_stack()):
                self.__exit__(None, None, None)

    @property
    def violation(self) -> str | None:
        """The first broken rule (a message), or None. Read-only: the mode is on torch's dispatch stack,
        where learner code can reach it, and the first violation is never taken back."""
        return self._violation

    def _violate(self, message: str) -> None:
        if self._violation is None:
            self._violation = message

    #: What the probe judges by: fixed once it is made (the mode sits on torch's dispatch stack, where
    #: learner code can reach it; a red team switched the rules off there).
    _RULES = frozenset({"rule", "where", "hint", "size_limit", "size_what", "reduce_limit", "autograd", "one_pass",
                        "reduce_scalars", "scalar_limit", "_sealed"})

    def __setattr__(self, name: str, value) -> None:
        if name == "_violation" and getattr(self, "_violation", None) is not None:
            raise AttributeError("a method probe's violation is never taken back")
        if name == "_internal" and getattr(self, "_internal", None) is not None:
            raise AttributeError("a method probe's internal error is never taken back")
        if name in self._RULES and getattr(self, "_sealed", False):
            raise AttributeError(f"a method probe's rules are fixed when it is made ({name})")
        super().__setattr__(name, value)

    @property
    def decides(self) -> bool:
        """False when no rule but the fused-attention one applies to this case (sizes too small to
        tell a tile from a whole matrix); checkers then skip the probe and its overhead, since the
        larger cases of the same test catch a fused call."""
        return (self.size_limit is not None or self.reduce_limit is not None or self.autograd is not None
                or self.one_pass)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # torch would wrap the hook in torch._dynamo: a 1 s import per kernel, for nothing

    # ------------------------------------------------------------------ the dispatch hook
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        info = self._facts.get(func)
        if info is None:
            info = self._facts[func] = _facts(func)
        self.ops += 1
        if info[1]:  # a view: same storage as an input the probe already knows
            return out
        # sparse, nested, quantized or mkldnn results have no storage the probe can follow, and their
        # sizes are not the dense ones its rules read: no lesson of 01-03 needs them (a red team held
        # the whole score matrix as a sparse tensor)
        odd = [t.layout for t in ((out,) if isinstance(out, torch.Tensor) else tensors_in(out))
               if t.layout != torch.strided or t.is_quantized or t.is_nested]
        if odd and self.decides:
            self._violate(f"{self.rule}: {func} made a {odd[0]} tensor{' (quantized or nested)' if odd[0] == torch.strided else ''}; "
                          f"the method checks follow plain (strided) tensors only. {self.hint}")
        try:
            # the storages stay alive until the probe goes, so a later allocation cannot reuse
            # an address and pass for something the probe saw
            carried = any(t.numel() > 1 and self._from_outside(t) for t in tensors_in((args, *(kwargs or {}).values())))
            # constants: made from no data at all (torch.ones(T_q, T_k).tril(), a causal mask or bias);
            # data written into one (an in-place op, a slice assignment) makes it data again
            # (an operator that reads no values, `q.new_ones(T_q, T_k)`, makes one too; a Python number
            # wrapped into a one-element tensor the probe never saw made, `torch.tensor(0.0)`, is no data)
            constant = _reads_no_values(info[0]) or all(
                _storage(t) in self._constant or t.numel() <= 1 and _storage(t) not in self.seen
                for t in tensors_in((args, *(kwargs or {}).values())))
            for t in ((out,) if isinstance(out, torch.Tensor) else tensors_in(out)):
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if not ptr:  # an empty tensor: address 0 must never pass for a storage the probe saw
                    continue
                if constant:
                    self._constant.add(ptr)
                else:
                    self._constant.discard(ptr)
                (self.foreign if carried else self.seen)[ptr] = storage
                if not t.is_inference():  # inference tensors have no version counter
                    # autograd bumps an in-place op's version counter after this hook returns
                    self.versions[ptr] = t._version + info[3]
            if self.violation is None:
                self._judge(func, info, args, kwargs or {}, out)
            if self.one_pass and self.violation is None:
                self._follow_reads(func, (args, *(kwargs or {}).values()), out)
        except Exception as error:  # noqa: BLE001 (the probe must never break learner code)
            # but a probe that failed judged nothing after this point: the grade cannot rest on it
            if self._internal is None:
                self._internal = f"{type(error).__name__} in the method probe at {func}: {error}"[:300]
        return out

    @property
    def internal_error(self) -> str | None:
        """The probe's own first error, or None. Such an error leaves the learner's call running but
        the method unjudged from there on, so the checkers flag it for review instead of passing it.
        Read-only and never taken back, like :attr:`violation`."""
        return self._internal

    def _judge(self, func, info, args, kwargs, out) -> None:
        name = info[0]
        node = torch._C._current_autograd_node() if self.autograd else None
        if self.autograd == "own_node" and node is None:
            return  # the given forward, not the learner's backward
        if node is not None:
            node_name = node.name()
            if self.autograd == "forbid" or _BUILTIN_NODE.search(node_name):
                self._violate(f"{self.where + ': ' if self.where else ''}the notebook asks you to apply the "
                              f"backward formulas yourself, but your code ran autograd's backward "
                              f"({node_name} computed {func}). Compute dS = P * (dP - D) and the "
                              f"products for dq, dk, dv tile by tile; torch.autograd.grad, .backward() "
                              f"and torch.func.vjp are not allowed here")
                return
        if info[2]:
            self._violate(f"{self.rule}: your code called the library's fused attention ({func}). "
                          f"{self.hint}")
            return
        outs = [out] if isinstance(out, torch.Tensor) else list(tensors_in(out))
        if not outs:
            return
        if self.size_limit is not None:
            for t in outs:
                # complex too: a red team held the score matrix as complex numbers and kept .real
                if t.numel() >= self.size_limit and (t.is_floating_point() or t.is_complex()) \
                        and _storage(t) not in self._constant:  # a float causal mask holds no scores
                    self._violate(f"{self.rule}: an intermediate of shape {tuple(t.shape)} was built "
                                  f"({func}), as large as {self.size_what}. {self.hint}")
                    return
        # Not statistics of the data: a reduction of masks or indices only (`mask.sum() == mask.numel()`,
        # `if torch.isinf(m).any():`), and, where ``reduce_scalars`` is off (02, 03), one number from a
        # whole tensor (a tile skipped when `s.max() == -inf`, a debugging `print(o.abs().max())`): the
        # shortcuts these rules catch compute a statistic per row
        numeric = any(t.is_floating_point() or t.is_complex() for t in tensors_in((args, *kwargs.values())))
        scalar = not self.reduce_scalars and all(t.numel() == 1 for t in outs)
        if self.reduce_limit is not None and name not in _SELECTIONS and numeric:
            combined = self._combined(name, args, outs, kwargs)
            if combined > self.reduce_limit and scalar and self.scalar_budget > 0:
                self.scalar_budget -= 1  # a tile's skip test or a debugging print: a few per tile pair
            elif combined > self.reduce_limit and scalar:
                self._violate(f"{self.rule}: more than {self.scalar_limit} operations reduced more than a tile "
                              f"to one number each ({func} combined {combined}): a row's statistics computed one "
                              f"number at a time skip the tiles. {self.hint}")
            elif combined > self.reduce_limit:
                self._violate(f"{self.rule}: one operation ({func}) combined {combined} elements per "
                              f"result, more than a block holds. {self.hint}")

    def _follow_reads(self, func, args, out) -> None:
        """The one-pass rule (see the module docstring): which elements of an input this operator read.

        A source's elements are numbered as in the input (contiguous); a whole-input copy with the same
        shape, contiguous (``x.to(float32)``, ``x * 1``), stands for it. Reading elements read before and
        since moved on from is a second pass; reading only elements of the last read (a block used by
        several operators in a row) is not moving on. Operators that read no values (``new_zeros``,
        ``zeros_like``) and those whose results are all masks (``isneginf``) are not counted."""
        name = func.overloadpacket.__name__
        outs = [out] if isinstance(out, torch.Tensor) else list(tensors_in(out))
        if _reads_no_values(name) or (outs and all(o.dtype == torch.bool for o in outs)):
            return
        tensors = list(tensors_in(args))
        for t in tensors:
            source = self._sources.get(_storage(t))
            if source is None:
                continue
            src, base, shape = source
            left = self._left[src]
            whole = t.numel() == left.size and tuple(t.shape) == shape
            copies = [o for o in outs if tuple(o.shape) == shape and o.is_contiguous() and _storage(o)
                      and (o.is_floating_point() or o.is_complex())]
            if whole and copies and name in _COPIES:
                # x.double() inside the loop: a copy consumes nothing; reads of it are reads of x
                for o in copies:
                    self._sources[_storage(o)] = (src, o.storage_offset(), shape)
                continue
            read = self._elements(t, base, name, args, tensors)
            if read is None or not read.size:
                continue
            if left[read].any():
                first = int(read[left[read]][0])
                self._violate(f"{self.rule}: {func} read element {tuple(int(i) for i in np.unravel_index(first, shape))} of x again "
                              f"after moving on to later blocks (a second pass over the row). {self.hint}")
                return
            if whole and copies:  # a transform of all of x (x * scale) before any block: it stands for x
                for o in copies:
                    self._sources[_storage(o)] = (src, o.storage_offset(), shape)
                continue
            last = self._last.get(src)
            if last is not None and np.isin(read, last, assume_unique=True).all():
                continue  # still the block read last
            if last is not None:
                left[np.setdiff1d(last, read, assume_unique=True)] = True
            self._last[src] = read

    @staticmethod
    def _elements(t, base: int, name: str, args, tensors):
        """The source's element numbers that ``t`` shows, narrowed to what a selection operator picks
        (``index``, ``index_select``, ``gather``, ``take``, ``masked_select``); sorted, unique."""
        offsets = np.full(tuple(t.shape), t.storage_offset() - base, dtype=np.int64)
        for dim, (n, stride) in enumerate(zip(t.shape, t.stride())):
            offsets += (np.arange(n, dtype=np.int64) * stride).reshape([-1 if d == dim else 1 for d in range(t.dim())])
        if name in _SELECTIONS and t is tensors[0]:
            index = lambda x: x.detach().cpu().numpy()  # noqa: E731
            if name == "index" and len(args) > 1 and isinstance(args[1], (list, tuple)):
                offsets = offsets[tuple(slice(None) if i is None else index(i) for i in args[1])]
            elif name == "index_select" and len(args) > 2:
                offsets = np.take(offsets, index(args[2]), axis=args[1])
            elif name == "gather" and len(args) > 2:
                offsets = np.take_along_axis(offsets, index(args[2]), axis=args[1])
            elif name == "take" and len(args) > 1:
                offsets = offsets.ravel()[index(args[1])]
            elif name == "masked_select" and len(args) > 1:
                offsets = offsets[np.broadcast_to(index(args[1]), offsets.shape)]
        return np.unique(offsets)

    @staticmethod
    def _combined(name: str, args, outs, kwargs=None) -> int:
        """How many input elements one output element of this operator depends on (at most)."""
        tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        if not tensors:
            return 0

        def arg(pos: int, key: str, default=None):  # positional or keyword (sort.stable takes dim by name)
            return args[pos] if len(args) > pos else (kwargs or {}).get(key, default)

        def along(x, dim) -> int:
            return int(x.shape[dim if isinstance(dim, int) else -1]) if x.dim() else 1

        # accumulating through an index combines what lands on one place, whatever the output's size
        # (a red team reduced whole rows with scatter_reduce into one column): the most sources any one
        # destination gets (an honest `dk.index_put_(..., accumulate=True)` of a tile gets one each)
        index = arg(2, "index")
        reducing = name in _SCATTERS or name in ("scatter", "scatter_") and (
            len(args) > 4 or "reduce" in (kwargs or {}))
        if reducing and isinstance(index, torch.Tensor) and index.dim():
            return _most_per_place(_along_places(index, arg(1, "dim")))
        if name in _INDEX_ADDS and isinstance(index, torch.Tensor):
            return _most_per_place(index.detach().cpu().numpy().reshape(-1, 1))
        if name in _PUTS and arg(3, "accumulate") is True:
            indices = arg(1, "indices")
            indices = [i for i in (indices if isinstance(indices, (list, tuple)) else [indices])
                       if isinstance(i, torch.Tensor)]
            return _most_per_place(torch.stack(torch.broadcast_tensors(*indices), dim=-1).reshape(-1, len(indices))
                                   .detach().cpu().numpy()) if indices else 0
        if name == "renorm":  # the norm of each slice along dim: everything but that dim
            x = tensors[0]
            return int(x.numel() // max(along(x, arg(2, "dim")), 1))
        if name == "embedding_renorm_":
            return int(tensors[0].shape[-1]) if tensors[0].dim() else 1
        if name in _WINDOWS and len(tensors) > 1 and arg(6, "transposed") is True:
            weight = tensors[1]  # (in, out / groups, kernel...): an output sums in / groups channels
            groups = arg(8, "groups", 1) or 1
            return int(weight.shape[0] // max(int(groups), 1) * math.prod(weight.shape[2:]))
        weights = arg(1, "weights")
        if name == "bincount" and isinstance(weights, torch.Tensor):
            return int(weights.numel())
        if name in _ALONG_DIM:
            pos = _ALONG_DIM[name]
            return along(tensors[0], arg(pos, "dim") if pos is not None else -1)
        if name in _FFTS:
            dims = arg(1, "dim")
            dims = dims if isinstance(dims, (list, tuple)) else [dims] if isinstance(dims, int) else []
            return int(math.prod(tensors[0].shape[d] for d in dims)) if dims else int(tensors[0].numel())
        if name in _WHOLE:
            return int(tensors[0].numel())
        if name == "conv_tbc" and len(tensors) > 1 and tensors[1].dim() == 3:  # weight: (width, in, out)
            return int(tensors[1].shape[0] * tensors[1].shape[1])
        if name == "addbmm" and len(tensors) > 2 and tensors[1].dim() == 3:  # sums over the batch too
            return int(tensors[1].shape[0] * tensors[1].shape[-1])
        if name in _WINDOWS and len(tensors) > 1:
            weight = tensors[1]
            return int(weight.numel() // max(weight.shape[0], 1))
        if name in _POOLS:
            kernel = arg(1, "kernel_size", 1)
            return int(math.prod(kernel if isinstance(kernel, (list, tuple)) else [kernel]))
        if name in _ADAPTIVE:
            size = arg(1, "output_size", ())
            size = size if isinstance(size, (list, tuple)) else [size]
            x = tensors[0]
            spans = [-(-int(n) // max(int(o), 1)) + (1 if int(n) > int(o) and int(n) % max(int(o), 1) else 0)
                     for n, o in zip(x.shape[x.dim() - len(size):], size)]
            return int(math.prod(spans))
        if name in _BAGS and len(tensors) > 1:
            return int(tensors[1].numel())  # the indices: one bag may hold them all
        if name in _PRODUCTS:
            operand = tensors[min(_PRODUCTS[name], len(tensors) - 1)]
            return int(operand.shape[-1]) if operand.dim() else 1
        if name in _SCANS:
            return along(tensors[0], arg(1, "dim", -1))
        # the smallest output: native_layer_norm's normalised output is as large as its input, but its
        # mean combines a whole row (a red team took a row's sum from it)
        biggest = max(t.numel() for t in tensors)
        produced = min((t.numel() for t in outs if t.numel()), default=0)
        return biggest // max(produced, 1) if 0 < produced < biggest else 0

    # ------------------------------------------------------------------ after the call
    def _from_outside(self, t: torch.Tensor) -> bool:
        ptr = _storage(t)
        return (t.numel() > 0 and not ptr) or ptr not in self.seen or ptr in self.foreign

    def _written_unseen(self, t: torch.Tensor) -> bool:
        try:
            return t._version != self.versions.get(_storage(t), t._version)
        except Exception:  # noqa: BLE001 (an inference tensor has no version counter)
            return False

    def unseen(self, result) -> list[tuple[int, ...]]:
        """Shapes of the tensors in ``result`` that no operator under the probe produced, that carry
        data from outside its view, or that were written after the last operator it saw write them."""
        return [tuple(t.shape) for t in tensors_in(result) if self._from_outside(t) or self._written_unseen(t)]

    def verdict(self) -> None:
        """Raise ``AssertionError`` with the first violation, if any."""
        if self.violation:
            raise AssertionError(self.violation)


def reduce_rule(*, n_rows: int, block_size: int, n: int) -> int | None:
    """The reduce limit for notebook 01: one block of every row and its running value
    (``n_rows * (block_size + 1)``), or None
    when the rows are so short that a whole-row reduction combines no more than that."""
    limit = max(n_rows, 1) * (block_size + 1)  # + 1: a block with the running max carried in (torch.cat)
    return limit if n > limit else None


def tile_rule(*, B: int, H: int, T_q: int, T_k: int, block_q: int, block_k: int, largest_io: int) -> int | None:
    """The size limit for notebooks 02-03: one head's score matrix (``T_q * T_k`` elements), when
    that is larger than a tile of every head (``B*H*block_q*block_k``) and than every input and
    output (``largest_io`` elements); None when this case cannot tell the two apart."""
    score = T_q * T_k
    tile = B * H * min(block_q, T_q) * min(block_k, T_k)
    return score if score > max(tile, largest_io) else None


def _most_per_place(places: np.ndarray) -> int:
    """How many rows of ``places`` (one destination each: an index tuple, or a (row, index) pair)
    are the same, at most: how many sources an accumulating write adds into one destination."""
    return int(np.unique(places, axis=0, return_counts=True)[1].max()) if len(places) else 0


def _along_places(index: torch.Tensor, dim) -> np.ndarray:
    """Destinations of a scatter along ``dim``: (the coordinates in every other dim, the index value)."""
    a = np.moveaxis(index.detach().cpu().numpy(), dim if isinstance(dim, int) else -1, -1)
    rows = np.broadcast_to(np.arange(a.size // max(a.shape[-1], 1))[:, None], (a.size // max(a.shape[-1], 1), a.shape[-1]))
    return np.stack([rows.ravel(), a.reshape(-1)], axis=1)


def row_rule(*, T_k: int, block_k: int, D: int, T_q: int | None = None, block_q: int | None = None) -> int | None:
    """The reduce limit for notebooks 02 and 03: what one tile's operations combine per result, a key
    tile (``block_k`` scores: the tile's max and sum, P @ V, dS @ K), a query tile (backward, when
    ``T_q`` and ``block_q`` are given: dS^T @ Q, P^T @ dO) or a head dimension (``D``: Q K^T, dO V^T);
    None when no row or column is longer than that (a whole-row softmax then combines no more)."""
    spans = [(T_k, block_k)] + ([(T_q, block_q)] if T_q is not None and block_q is not None else [])
    limit = max(D, *(min(block, length) for length, block in spans))
    return limit if any(length > limit for length, _ in spans) else None
