"""The work ledger's data flow: which products and which loaded tensors each value of a kernel derives from.

Under ``TRITON_INTERPRET=1`` a kernel's values are the interpreter's ``TensorHandle`` objects, and
:func:`attnlab.checking.loads.record` wraps every builder operation with :func:`passing_flows`, which
gives each result two tags from its operands:

- a *flow* tag (:data:`FLOW_ATTR`, a :class:`FlowNode` graph whose leaves are the ledger's ``Dot``
  records): the products the value derives from, so a store marks the products that reach the output
  (a ``tl.dot`` whose result is thrown away, or used where it changes nothing, is no work);
- a *sources* tag (:data:`SOURCES_ATTR`): the tensors the value was loaded from, so each ``tl.dot`` is
  identified by its operands (:func:`sources`: S = QKᵀ has a Q-only and a K-only operand).

An operand that leaves the result exactly as another operand's values passes neither (:func:`idle_operand`,
:func:`same_values`). :func:`live_flops` counts a product's FLOPs on live lanes (padding multiplies nothing).
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["FLOW_ATTR", "SOURCES_ATTR", "FlowNode", "INDEX_OPS", "flow_tags", "join_flows", "give_flow",
           "transpose_flows", "passing_flows", "same_values", "idle_operand", "sources", "pass_sources",
           "mark_sources", "live_flops"]


#: The attribute of an interpreter TensorHandle that holds its flow tag (absent: derived from no product).
FLOW_ATTR = "_attnlab_flow"


class FlowNode:
    """A node of the data-flow graph: the products (:class:`Dot` leaves) a tensor derives from are the
    leaves reachable through ``parents``. An operation on one tagged tensor passes its tag on; one
    on several makes a node, so each operation costs O(1) and a store walks the graph once."""

    __slots__ = ("parents",)

    def __init__(self, parents) -> None:
        self.parents = parents


def flow_tags(args, out: list) -> list:
    """The flow tags of the interpreter handles in ``args`` (tensors, handles, lists and tuples)."""
    for a in args:
        if isinstance(a, (list, tuple)):
            flow_tags(a, out)
            continue
        a = getattr(a, "handle", a)  # a tl.tensor wraps its handle
        tag = getattr(a, FLOW_ATTR, None)
        if tag is not None and all(tag is not t for t in out):
            out.append(tag)
    return out


def join_flows(tags: list):
    return None if not tags else tags[0] if len(tags) == 1 else FlowNode(tuple(tags))


def give_flow(result, tag):
    """Give ``tag`` to every handle in ``result`` (a handle, a tl.tensor, or a tuple or list of them)."""
    if tag is None:
        return result
    for r in result if isinstance(result, (list, tuple)) else (result,):
        h = getattr(r, "handle", r)
        if hasattr(h, "data") and hasattr(h, "dtype"):
            try:
                setattr(h, FLOW_ATTR, tag)
            except AttributeError:  # an object without a __dict__ carries no data a kernel computes with
                pass
    return result


#: Builder operations on integers, booleans and pointers (offsets, masks, addresses), left unwrapped: most of
#: a kernel's operations, and no product's value reaches an output through them in any honest kernel
#: (a value sent through them loses its tag: only a kernel doing so loses counted FLOPs).
INDEX_OPS = re.compile(r"create_(?:addptr|make_range|get_program_id|get_num_programs|icmp\w*|int_cast|add|sub|mul|"
                        r"[su]div|[su]rem|shl|lshr|ashr|and|or|xor|(?:min|max)[su]i)$")


def transpose_flows() -> None:
    """Make ``tensor.T`` pass flow tags on for the launch that starts (the interpreter sets its own
    ``T``, which makes a handle without the builder, when the launch patches the language, and puts
    the one from before back when the launch ends; the course's launcher patches once per launch)."""
    import triton.language as tl

    transpose = getattr(tl.core.tensor, "T", None)
    fget = getattr(transpose, "fget", None)
    if fget is None or getattr(fget, "_passes_flow", False):
        return

    def flow_transpose(self):
        return mark_sources(give_flow(fget(self), join_flows(flow_tags((self,), []))), sources(self))
    flow_transpose._passes_flow = True
    tl.core.tensor.T = property(flow_transpose)


def passing_flows(fn, *, select: bool = False):
    """``fn`` (an operation of the interpreter), passing the flow tags of its arguments to its results.

    ``select``: ``fn`` is ``create_select(cond, x, y)``; a branch that no lane picks passes nothing on
    (``tl.where(False, product, x)`` does not make ``x`` derive from the product)."""
    def wrapper(*args, **kw):
        result = fn(*args, **kw)
        for a in args:  # the fast path: most operations (offsets, masks, pointers) see no tagged operand
            if getattr(a, FLOW_ATTR, None) is not None or getattr(a, SOURCES_ATTR, None) or type(a) in (list, tuple) \
                    or hasattr(a, "handle"):
                break
        else:
            if not kw:
                return result
        if select and len(args) == 3 and hasattr(args[0], "data"):
            cond = np.asarray(args[0].data, dtype=bool)
            args = (args[0],) + ((args[1],) if cond.any() else ()) + ((args[2],) if not cond.all() else ())
        pass_sources(args[1:] if select else args, kw, result)
        tags, tagged = [], []
        for a in args + tuple(kw.values()) if kw else args:  # the common case, flat handles, without flow_tags
            tag = join_flows(flow_tags(a, [])) if isinstance(a, (list, tuple)) else getattr(getattr(a, "handle", a), FLOW_ATTR, None)
            if tag is not None:
                tagged.append((a, tag))
        if len(args) > 1 and tagged:
            tagged = [(a, tag) for a, tag in tagged if not idle_operand(a, args, result)]
        for _, tag in tagged:
            if all(tag is not t for t in tags):
                tags.append(tag)
        return give_flow(result, join_flows(tags)) if tags else result
    return wrapper


def same_values(x, result) -> bool:
    """Whether handle ``x``'s values, broadcast, are exactly ``result``'s (NaN never equals)."""
    try:
        a, r = np.asarray(x.data), np.asarray(result.data)
        if a.size == 0 or r.size == 0 or not a.flat[0] == r.flat[0]:  # most operands differ at once: cheap no
            return False
        if a.shape == r.shape:
            return bool(np.array_equal(a, r))
        return bool(np.array_equal(np.broadcast_to(a, r.shape), r))
    except (AttributeError, ValueError, TypeError):
        return False


def idle_operand(a, args, result) -> bool:
    """Whether argument ``a`` of an operation did not change its result: the result is exactly the values
    of another argument that derives from no product, and not ``a``'s own (``0 * product``, ``x +
    1e-30 * product``, ``maximum(x, product - inf)``, ``x + (product - product)``, with ``x`` computed
    without products). Only an untagged operand counts: in an honest kernel a product's contribution
    may underflow to nothing (growing scores make ``exp(s - m)`` 0 for a whole tile, ``acc * alpha``
    with ``alpha`` 0), and the accumulator it is added to derives from products itself."""
    if not hasattr(result, "data") or isinstance(a, (list, tuple)) or same_values(a, result):
        return False
    return any(b is not a and hasattr(b, "data") and getattr(b, FLOW_ATTR, None) is None and same_values(b, result)
               for b in args)


# ------------------------------------------------------------------------------------------ sources
#: The attribute of an interpreter TensorHandle that holds the tensors its values were loaded from (a frozenset
#: of buffer names; absent: a constant, an index, or derived from nothing loaded).
SOURCES_ATTR = "_attnlab_sources"


def sources(value) -> frozenset:
    """The buffers (ledger names) that ``value`` (a handle or tl.tensor) was computed from: the tensors of
    the loads it derives from, through every operation and every ``tl.dot`` (a product's result derives from
    both operands). An operand that leaves an operation's result exactly as another operand's values
    (``p + 0 * dp``) passes nothing on; the condition of a ``tl.where`` passes nothing (the values come
    from its branches)."""
    return getattr(getattr(value, "handle", value), SOURCES_ATTR, None) or frozenset()


def pass_sources(args, kw, result) -> None:
    """Mark ``result`` with the sources of the operands (``args``, ``kw``) that changed it.

    An operand is left out when the result is exactly another operand's values and not its own
    (``p + 1e-30 * dp``, ``0 * dp``), except where that other operand has sources itself and the result
    is all zeros: an honest ``dS = P * (dP - Δ)`` over a tile whose P underflowed to 0 is still dS."""
    names, found = set(), []
    for a in tuple(args) + tuple(kw.values()):
        for h in (a if isinstance(a, (list, tuple)) else (a,)):
            h = getattr(h, "handle", h)
            src = getattr(h, SOURCES_ATTR, None)
            if src:
                found.append((h, src))
    if not found:
        return
    flat = [getattr(h, "handle", h) for a in args for h in (a if isinstance(a, (list, tuple)) else (a,))]
    for h, src in found:
        if len(flat) > 1 and hasattr(result, "data") and not same_values(h, result) and \
                any(b is not h and hasattr(b, "data") and same_values(b, result)
                    and (not getattr(b, SOURCES_ATTR, None) or np.any(np.asarray(result.data))) for b in flat):
            continue  # h changed nothing: the result is another operand's values
        names |= src
    if names:
        mark_sources(result, frozenset(names))


def mark_sources(result, names: frozenset):
    for r in result if isinstance(result, (list, tuple)) else (result,):
        h = getattr(r, "handle", r)
        if hasattr(h, "data") and hasattr(h, "dtype"):
            try:
                setattr(h, SOURCES_ATTR, names | getattr(h, SOURCES_ATTR, frozenset()))
            except AttributeError:
                pass
    return result


def live_flops(a, b) -> int:
    """The FLOPs of ``a @ b`` (batched over leading axes) on live lanes: a row of ``a``, a column of ``b``,
    or an inner lane (a column of ``a``, a row of ``b``) that is zero throughout, in an operand computed from
    no product (loaded or constant: masked-off padding, ``tl.zeros``, a block joined with zeros), multiplies
    nothing. An operand derived from a product (P, dS) is taken whole: its zeros are results (a causal mask,
    an underflowed ``exp``), not padding."""
    A, B = np.asarray(a.data), np.asarray(b.data)
    batch = A.shape[:-2]
    A, B = A.reshape((-1,) + A.shape[-2:]), B.reshape((-1,) + B.shape[-2:])
    nz_a = A != 0 if getattr(a, FLOW_ATTR, None) is None else np.ones(A.shape, dtype=bool)
    nz_b = B != 0 if getattr(b, FLOW_ATTR, None) is None else np.ones(B.shape, dtype=bool)
    rows = nz_a.any(axis=2).sum(axis=1)                      # (batch,): live rows of a
    cols = nz_b.any(axis=1).sum(axis=1)                      # live columns of b
    inner = (nz_a.any(axis=1) & nz_b.any(axis=2)).sum(axis=1)  # inner lanes live in both
    del batch
    return int(2 * (rows * cols * inner).sum())
