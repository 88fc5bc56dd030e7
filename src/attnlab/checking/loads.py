"""The work ledger: what each program of an interpreted Triton launch reads, writes and multiplies.

Notebooks 04, 05, 07 and 08 teach a *method* (one program per softmax row reading it once;
FlashAttention streaming K and V in tiles, each tile once, skipping causal tiles past the diagonal,
multiplying tiles with ``tl.dot``; a backward whose programs each own one tile; split-K decoding
reading each K/V tile once per GQA group), and a kernel can produce the right numbers without it.
Under ``TRITON_INTERPRET=1`` every memory access and every ``tl.dot`` of a kernel goes through one
object, Triton's ``interpreter_builder``. :func:`record` wraps its entry points for the duration of
the ``with`` block and writes a :class:`Ledger`: per launch (:class:`Launch`: the kernel's name and
grid) and per program (``tl.program_id``),

- every access to the tensors the check owns, as element offsets of the active lanes, with its kind:
  ``"load"`` (``tl.load``, and what Triton routes through it: tensor-descriptor loads and gathers,
  ``tl.atomic_load``...), ``"store"``, or ``"atomic"`` (``tl.atomic_*``: a read **and** a write),
  the shape of the block and a serial number (one per ``tl.load``/``tl.store`` call: how many tiles,
  i.e. loop iterations, a program read);
- every ``tl.dot`` (and ``tl.dot_scaled``): its (M, N, K) and FLOPs, and where its result went: the
  interpreter's tensors carry a data-flow tag (:class:`attnlab.checking.flow.FlowNode`) from each product through every tensor
  operation (the builder's ``create_*`` methods, reductions and scans, ``.T``) to the stores, so a
  product counts as work only if a value derived from it is stored (:meth:`Launch.feeding`); one
  whose result is thrown away, stored and then overwritten, or used where it changes nothing
  (``0 * product``, an addition rounded away: :func:`attnlab.checking.flow.idle_operand`) does not; each loaded value also carries the
  tensors it came from, so a product is named by its operands (:func:`attnlab.checking.flow.sources`).

A lane whose address lies in none of those tensors is recorded and switched off before the access,
so a wild load cannot crash the grader's Python process. A builder method that touches memory but
that this module does not know how to account is wrapped too and recorded as *unaccounted*, so a
future Triton cannot open a silent path. What the method implies is not decided here: each notebook
declares its cost model as data (:mod:`attnlab.checking.work_models`), compared with the ledger generically;
the ``check_*_reads`` functions below add the precise diagnoses of notebooks 04, 05 and 08.

A compiled launch records nothing: the accounted checks run their CPU-sized cases through the
interpreter on every machine, a GPU machine included (:func:`attnlab.verify.kernel_device`).
"""
# Length: Split along its one seam (the data flow and operand sources now live in checking/flow.py);
# what stays is one job: the ledger of every launch, its accounting hooks into Triton's interpreter,
# and the read and race checks built on it (they read the same Access records).

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from .flow import (FLOW_ATTR, INDEX_OPS, give_flow, join_flows, flow_tags, live_flops, mark_sources, passing_flows,
                   same_values, sources, transpose_flows)

__all__ = ["Access", "Dot", "Launch", "Ledger", "Race", "available", "record", "races", "check_races", "sources",
           "live_flops",
           "check_softmax_reads", "check_flash_reads", "check_decode_reads", "interpreter_internals",
           "memory_methods", "ROUTED"]

#: Builder methods that touch memory themselves (every other memory method of Triton 3.x routes
#: through ``create_masked_load``/``create_masked_store`` on the builder instance, so through these).
_PRIMITIVES = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
#: Memory methods known to reach memory only through the primitives (checked: Triton 3.9's interpreter).
ROUTED = frozenset({"create_load", "create_store", "create_atomic_load", "create_atomic_store",
                    "create_atomic_poll", "create_descriptor_load", "create_descriptor_store",
                    "create_descriptor_gather", "create_descriptor_scatter", "create_make_tensor_descriptor",
                    "create_tensor_pointer_load", "create_tensor_pointer_store"})
#: Methods whose names match below but that work on registers only (``tl.gather`` picks from a tensor).
_REGISTERS = frozenset({"create_gather"})
#: Builder method names that suggest a memory access: any not known above is recorded as unaccounted.
_MEMORY_NAME = re.compile(r"load|store|atomic|descriptor|gather|scatter|prefetch|tma|copy")
#: The other methods :func:`record` needs: launch boundaries and matrix products (``create_dot_scaled``,
#: Triton's FP8/FP4 product, is wrapped too where it exists).
_EXTRA = ("set_grid_dim", "create_dot")
#: Access kinds that read memory, and those that write it (an atomic does both).
READS, WRITES = ("load", "atomic"), ("store", "atomic")


@dataclass
class Access:
    """The active lanes of one memory access of one program in one tensor."""

    program: tuple[int, int, int]
    tensor: str
    kind: str            # "load", "store" or "atomic" (an atomic reads and writes)
    index: np.ndarray    # int64 element offsets into the tensor's buffer, one per active lane
    shape: tuple = ()    # the shape of the block of pointers (the tile), masked lanes included
    call: int = 0        # serial number of the builder call in its launch (one per tl.load/tl.store)


@dataclass(eq=False)
class Dot:
    """One ``tl.dot`` of one program: (M, K) x (K, N), ``batch`` times; ``stores``: the (tensor, store
    call) pairs whose stored values derive from its result (an atomic's call: ``kind`` "atomic")."""

    program: tuple[int, int, int]
    m: int
    n: int
    k: int
    batch: int = 1
    stores: set = field(default_factory=set)
    #: the tensors each operand was loaded from, (a's, b's): what identifies the product (S = QKᵀ has a
    #: Q-only and a K-only operand, whatever their order), see :func:`sources`
    operands: tuple = (frozenset(), frozenset())
    #: the FLOPs on live lanes: a row, column or inner lane of an operand computed from no product that is
    #: zero throughout (a masked-off load's padding, ``tl.zeros``) multiplies nothing (see :func:`live_flops`)
    live: int = -1
    parents = ()  # a leaf of the data-flow graph (see FlowNode)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


@dataclass
class Launch:
    """One kernel launch: its accesses, products and stray lanes, per program."""

    kernel: str
    grid: tuple[int, int, int]
    accesses: list[Access] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    strays: list[tuple[tuple[int, int, int], str, int]] = field(default_factory=list)
    unaccounted: list[str] = field(default_factory=list)
    calls: int = 0

    def of(self, tensor: str, kinds=READS) -> list[Access]:
        """Accesses to ``tensor`` of the given kinds (a kind, or a tuple: :data:`READS`, :data:`WRITES`)."""
        kinds = (kinds,) if isinstance(kinds, str) else kinds
        return [a for a in self.accesses if a.tensor == tensor and a.kind in kinds]

    def programs(self):
        """Every program of the grid, in launch order."""
        return [(x, y, z) for x in range(self.grid[0]) for y in range(self.grid[1]) for z in range(self.grid[2])]

    def busy(self) -> set:
        """The programs that read or wrote anything, or multiplied anything."""
        return {a.program for a in self.accesses} | {d.program for d in self.dots}

    def feeding(self, outputs) -> list[Dot]:
        """The products whose results reach ``outputs`` (tensor names): a value derived from the
        product was stored there and not overwritten by a later plain store of the launch (every
        lane of that store rewritten), or added there by an atomic. A ``tl.dot`` whose result is
        thrown away, or kept only in a store that a later one replaces, is not work done."""
        outputs = set(outputs)
        last: dict[str, np.ndarray] = {}      # per tensor: the call that wrote each element last
        for a in self.accesses:
            if a.kind == "store" and a.tensor in outputs and a.index.size:
                size = int(a.index.max()) + 1
                cur = last.get(a.tensor, np.zeros(0, np.int64))
                if cur.size < size:
                    cur = np.concatenate([cur, np.full(size - cur.size, -1, np.int64)])
                cur[a.index] = a.call
                last[a.tensor] = cur
        kept = {name: set(np.unique(calls[calls >= 0]).tolist()) for name, calls in last.items()}
        return [d for d in self.dots
                if any(t in outputs and (kind == "atomic" or call in kept.get(t, ())) for t, call, kind in d.stores)]


@dataclass
class Ledger:
    """Every launch inside one :func:`record` block, in order."""

    regions: list[tuple[str, int, int, int]]   # (name, first byte address, bytes, element size)
    launches: list[Launch] = field(default_factory=list)

    @property
    def current(self) -> Launch:
        if not self.launches:  # a builder call outside any launch (a test driving the builder by hand)
            self.launches.append(Launch("?", (1, 1, 1)))
        return self.launches[-1]

    @property
    def accesses(self) -> list[Access]:
        return [a for launch in self.launches for a in launch.accesses]

    @property
    def strays(self):
        return [s for launch in self.launches for s in launch.strays]

    def of(self, tensor: str, kinds=READS) -> list[Access]:
        """Accesses to ``tensor`` of ``kinds`` in every launch, in the order they ran."""
        return [a for launch in self.launches for a in launch.of(tensor, kinds)]

    def _start(self, grid, kernel: str) -> None:
        self.launches.append(Launch(kernel, tuple(int(g) for g in grid)))

    def _note(self, program, kind: str, ptrs, mask):
        """Record the active lanes of one access; return the mask with stray lanes switched off."""
        launch = self.current
        launch.calls += 1
        addr = np.asarray(ptrs.data)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape) if mask is not None \
            else np.ones(addr.shape, dtype=bool)
        lanes = addr[active].astype(np.int64)
        known = np.zeros(lanes.shape, dtype=bool)
        program = tuple(program) if program is not None else (0, 0, 0)
        width = _width(ptrs)  # bytes one lane touches: a pointer cast to a wider type reads several elements
        for name, base, nbytes, size in self.regions:
            inside = (lanes >= base) & (lanes + width <= base + nbytes)
            if inside.any():
                first = (lanes[inside] - base) // size
                last = (lanes[inside] + width - 1 - base) // size
                span = int((last - first).max()) + 1
                if span == 1:
                    index = first
                else:  # every element from each lane's first to its last
                    covered = first[:, None] + np.arange(span)[None, :]
                    index = covered[covered <= last[:, None]]
                launch.accesses.append(Access(program, name, kind, index, tuple(addr.shape), launch.calls))
                known |= inside
        if known.all():
            return mask
        launch.strays.append((program, kind, int((~known).sum())))
        keep = active.copy()
        keep[active] = known
        return type(mask)(keep, mask.dtype) if mask is not None else keep

    def _dot(self, program, a, b):
        """Record one product; return its :class:`Dot` (the leaf its result's flow tag starts from)."""
        sa, sb = np.shape(a.data), np.shape(b.data)
        if len(sa) < 2 or len(sb) < 2:
            return None
        batch = int(np.prod(sa[:-2])) if len(sa) > 2 else 1
        dot = Dot(tuple(program) if program is not None else (0, 0, 0), int(sa[-2]), int(sb[-1]), int(sa[-1]), batch,
                  operands=(sources(a), sources(b)), live=live_flops(a, b))
        self.current.dots.append(dot)
        return dot

    def _stored(self, value, kind: str, first: int) -> None:
        """The value of a store (or atomic) whose accesses start at ``first`` in the current launch:
        mark every product it derives from as reaching those tensors."""
        flow = getattr(value, FLOW_ATTR, None)
        launch = self.current
        if flow is None or len(launch.accesses) == first:
            return
        marks = {(a.tensor, a.call, kind) for a in launch.accesses[first:]}
        seen, stack = set(), [flow]
        while stack:  # a walk over the flow graph; every node once per store
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, Dot):
                node.stores |= marks
            stack.extend(node.parents)


def _width(ptrs) -> int:
    """Bytes each lane of a pointer block touches (its pointee's size; 1 for int1)."""
    try:
        return max(1, ptrs.dtype.element_ty.primitive_bitwidth // 8)
    except AttributeError:
        return 1


def available() -> bool:
    """True when this Triton's interpreter has the entry points :func:`record` wraps (Triton 3.x)."""
    try:
        from triton.runtime import interpreter as ti
    except ImportError:
        return False
    builder = getattr(ti, "interpreter_builder", None)
    return builder is not None and all(callable(getattr(builder, name, None)) for name in _PRIMITIVES + _EXTRA)


def memory_methods(builder) -> list[str]:
    """Builder methods whose names say they touch memory and that :func:`record` cannot account."""
    names = [n for n in dir(type(builder)) if n.startswith("create_") and _MEMORY_NAME.search(n)]
    known = set(_PRIMITIVES) | ROUTED | _REGISTERS
    return sorted(n for n in names if n not in known and callable(getattr(builder, n)))


def _launching_kernel() -> str:
    """The name of the kernel whose launch calls ``set_grid_dim`` (Triton's ``GridExecutor``)."""
    frame = sys._getframe(2)
    executor = frame.f_locals.get("self") if frame is not None else None
    fn = getattr(executor, "fn", None)
    return getattr(fn, "__name__", "?")


@contextlib.contextmanager
def record(buffers: dict[str, torch.Tensor]):
    """Record the memory accesses and products of the interpreted launches inside the ``with`` block.

    Args:
        buffers: name -> a contiguous CPU tensor holding the whole memory the check owns for that
            argument (a view's base buffer, spare room after it included). Offsets in the ledger are
            element offsets into these.

    Yields:
        The :class:`Ledger`, filled as the kernels run (one :class:`Launch` per launch).

    Raises:
        ValueError: a buffer that is not a contiguous CPU tensor.
    """
    from triton.runtime import interpreter as ti

    regions = []
    for name, t in buffers.items():
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"the work ledger needs contiguous CPU buffers; {name} is on {t.device}")
        regions.append((name, t.data_ptr(), t.numel() * t.element_size(), t.element_size()))
    ledger = Ledger(regions)
    builder = ti.interpreter_builder
    # Triton keeps only data on the builder instance (arch, options, the grid): a function there is
    # someone's patch, e.g. create_load rerouted past these wrappers (a red team read a row three times
    # unaccounted that way). It goes, and the review hears of it.
    patched = sorted(name for name, value in vars(builder).items() if callable(value))
    for name in patched:
        del builder.__dict__[name]
    if patched:
        from ..core import review

        review.flag(f"Triton's interpreter_builder had been patched ({', '.join(patched)}): the patch was removed "
                    f"before the work ledger")
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas
    grid_dim, dot = builder.set_grid_dim, builder.create_dot
    dot_scaled = getattr(builder, "create_dot_scaled", None)
    where = lambda: builder.grid_idx if getattr(builder, "grid_idx", None) is not None else (0, 0, 0)  # noqa: E731

    # the trailing arguments (cache and eviction policies, memory semantics) differ between Triton
    # versions; only the pointers and the mask matter here, and their positions have not changed
    def masked_load(ptrs, mask, *rest, **kw):
        first = len(ledger.current.accesses)
        result = load(ptrs, ledger._note(where(), "load", ptrs, mask), *rest, **kw)
        return mark_sources(result, frozenset(a.tensor for a in ledger.current.accesses[first:]))

    def masked_store(ptrs, value, mask, *rest, **kw):
        first = len(ledger.current.accesses)
        mask = ledger._note(where(), "store", ptrs, mask)
        ledger._stored(value, "store", first)
        return store(ptrs, value, mask, *rest, **kw)

    def atomic_rmw(op, ptr, val, mask, *rest, **kw):
        first = len(ledger.current.accesses)
        mask = ledger._note(where(), "atomic", ptr, mask)
        ledger._stored(val, "atomic", first)
        return mark_sources(rmw(op, ptr, val, mask, *rest, **kw), frozenset(a.tensor for a in ledger.current.accesses[first:]))

    def atomic_cas(ptr, cmp, val, *rest, **kw):
        before, first = len(ledger.current.strays), len(ledger.current.accesses)
        ledger._note(where(), "atomic", ptr, None)
        if len(ledger.current.strays) > before:  # no mask to switch lanes off: refuse the access itself
            raise MemoryError("tl.atomic_cas on memory outside the kernel's tensors")
        ledger._stored(val, "atomic", first)
        return mark_sources(cas(ptr, cmp, val, *rest, **kw), frozenset(a.tensor for a in ledger.current.accesses[first:]))

    def set_grid_dim(*grid):
        ledger._start(grid, _launching_kernel())
        transpose_flows()
        return grid_dim(*grid)

    def create_dot(a, b, *rest, **kw):  # the result derives from the product and from a, b and the accumulator
        leaf = ledger._dot(where(), a, b)
        result = dot(a, b, *rest, **kw)
        if rest and getattr(rest[0], FLOW_ATTR, None) is None and same_values(rest[0], result):  # zeros added to a product-free accumulator
            mark_sources(result, sources(rest[0]))
            return give_flow(result, join_flows(flow_tags((rest[0],), [])))
        mark_sources(result, sources(a) | sources(b) | (sources(rest[0]) if rest else frozenset()))
        return give_flow(result, join_flows(([leaf] if leaf else []) + flow_tags((a, b, rest, tuple(kw.values())), [])))

    def create_dot_scaled(lhs, lhs_scale, lhs_format, rhs, *rest, **kw):
        leaf = ledger._dot(where(), lhs, rhs)
        return give_flow(mark_sources(dot_scaled(lhs, lhs_scale, lhs_format, rhs, *rest, **kw), sources(lhs) | sources(rhs)),
                    join_flows(([leaf] if leaf else []) + flow_tags((lhs, lhs_scale, rhs, rest, tuple(kw.values())), [])))

    def unaccounted(name):
        method = getattr(builder, name)

        def wrapper(*args, **kw):
            ledger.current.unaccounted.append(name)
            return method(*args, **kw)
        return wrapper

    wrappers = {"create_masked_load": masked_load, "create_masked_store": masked_store,
                "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas,
                "set_grid_dim": set_grid_dim, "create_dot": create_dot}
    if dot_scaled is not None:
        wrappers["create_dot_scaled"] = create_dot_scaled
    wrappers.update({name: unaccounted(name) for name in memory_methods(builder)})
    # every other operation passes its arguments' flow tags on (loads start untagged: memory is data)
    wrappers.update({name: passing_flows(getattr(builder, name), select=name == "create_select")
                     for name in dir(type(builder)) if name.startswith("create_") and name not in wrappers
                     and not INDEX_OPS.match(name) and callable(getattr(builder, name))})
    for name, fn in wrappers.items():
        setattr(builder, name, fn)
    # the operations that make tensors without the builder: reductions and scans (restored on the
    # way out), and tensor.T, which each launch sets before set_grid_dim and puts back at its end
    apply = ti.ReduceScanOpInterface.apply
    ti.ReduceScanOpInterface.apply = passing_flows(apply)
    try:
        yield ledger
    finally:  # the class's own methods again (no function was left on the instance before)
        for name in wrappers:
            builder.__dict__.pop(name, None)
        ti.ReduceScanOpInterface.apply = apply


# ------------------------------------------------------------------------------------------- races
@dataclass
class Race:
    """Elements of one tensor that several programs of one launch touch, one of them by a plain store."""

    launch: int
    kernel: str
    tensor: str
    element: int
    programs: tuple        # the programs that touch ``element`` (first few)
    read_modify_write: bool  # the storing programs also loaded it (a load-add-store)


def races(ledger: Ledger) -> list[Race]:
    """The data races of every launch: an element stored by a plain (non-atomic) ``tl.store`` of one
    program and read, written or updated by another program of the same launch. On a GPU the
    programs run at the same time in no set order, so the result depends on timing (a load-add-store
    by two programs loses one of the additions). The interpreter runs programs one after another,
    which hides the race from the numbers; the ledger sees it, however the store is spelled.
    Only atomics (``tl.atomic_add``...) may meet on one element. One :class:`Race` per (launch, tensor)."""
    found = []
    for i, launch in enumerate(ledger.launches):
        for tensor in sorted({a.tensor for a in launch.accesses}):
            accesses = [a for a in launch.accesses if a.tensor == tensor and a.index.size]
            if not any(a.kind == "store" for a in accesses) or len({a.program for a in accesses}) < 2:
                continue
            ids = {p: n for n, p in enumerate(sorted({a.program for a in accesses}))}
            # one int64 key per (element, program): unique pairs without a 2-D unique
            keys = np.unique(np.concatenate([a.index * len(ids) + ids[a.program] for a in accesses]))
            elements, counts = np.unique(keys // len(ids), return_counts=True)
            shared = elements[counts > 1]
            if not shared.size:
                continue
            stored = np.concatenate([a.index for a in accesses if a.kind == "store"])
            racy = np.intersect1d(shared, stored)
            if not racy.size:
                continue
            element = int(racy[0])
            mine = set((keys[keys // len(ids) == element] % len(ids)).tolist())  # the programs touching it
            who = tuple(p for p, n in ids.items() if n in mine)
            loaded = {a.program for a in accesses if a.kind == "load" and element in a.index}
            storing = {a.program for a in accesses if a.kind == "store" and element in a.index}
            found.append(Race(i, launch.kernel, tensor, element, who[:4], bool(storing & loaded)))
    return found


def program_label(p, dims: int) -> str:
    """How a message names program ``p`` of a grid of ``dims`` axes ("program 3", "program (1, 0)")."""
    return f"program {p[0]}" if dims == 1 else f"program ({', '.join(str(i) for i in p[:dims])})"


def check_races(ledger: Ledger, *, where: str, dims: int = 2, names: dict | None = None) -> None:
    """Fail on the first race of :func:`races`, naming the tensor, the programs and the fix.

    Args:
        names: tensor -> how the message calls it (default: the buffer's name).

    Raises:
        AssertionError: naming the kernel, the tensor, two of the programs and what to use instead.
    """
    for race in races(ledger):
        name = (names or {}).get(race.tensor, race.tensor)
        who = " and ".join(program_label(p, dims) for p in race.programs[:2])
        what = ("each load and then store the same element (a read-modify-write)" if race.read_modify_write
                else "touch the same element, one of them with a plain tl.store")
        raise AssertionError(
            f"{where}: a race in {race.kernel}: {who} {what} of {name} (element {race.element}). On a GPU the "
            f"programs run at the same time, so one update overwrites the other; the interpreter runs them one "
            f"after another and hides it. Add into memory that several programs share with tl.atomic_add, "
            f"however the load and store are written.")


#: Names through which kernel code could touch memory behind the accounting's back (only possible
#: under the interpreter, where a kernel body is Python; on a GPU such a kernel does not compile).
_INTERNALS = re.compile(r"\b(?:interpreter_builder|interpreter_semantic|_interpreter|TensorHandle|GridExecutor|"
                        r"create_masked_load|create_masked_store|data_ptr|ctypes)\b|triton\.runtime\.interpreter")


def interpreter_internals(kernel) -> list[str]:
    """The names of Triton's interpreter internals (or raw memory access) that ``kernel`` or a
    ``@triton.jit`` function of its module mentions: code the load accounting cannot vouch for."""
    from ..core.device import is_kernel

    fns = [kernel.fn] + [v.fn for v in list(kernel.fn.__globals__.values()) if is_kernel(v) and v is not kernel]
    hits: set[str] = set()
    for fn in fns:
        try:
            hits.update(_INTERNALS.findall(inspect.getsource(fn)))
        except (OSError, TypeError):
            continue
    return sorted(hits)


def value_span(values) -> str:
    """The range of ``values`` as "lo..hi", or the one value when all are equal (for messages)."""
    lo, hi = int(np.min(values)), int(np.max(values))
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _strays(ledger: Ledger, dims: int, names: str) -> str | None:
    for program, kind, n in ledger.strays:
        verb = {"load": "read", "store": "wrote"}.get(kind, "updated")
        return (f"{program_label(program, dims)} {verb} {n} element(s) outside {names}: an address that is "
                f"off, or a {kind} without a mask. On a GPU that touches memory the kernel does not own "
                f"(wrong values, or a crash).")
    return None


# ---------------------------------------------------------------------------------------------- 04
def check_softmax_reads(ledger: Ledger, *, n_rows: int, n_cols: int, x_width: int, y_width: int,
                        block_size: int, where: str) -> None:
    """Notebook 04's rule: program i reads row i of the input, every column once, nothing else,
    and writes row i of the output only.

    Args:
        ledger: from :func:`record` with buffers ``input`` and ``output``.
        x_width, y_width: the row strides (elements) of input and output in those buffers.
        block_size: the BLOCK_SIZE the launcher passed (next power of two of n_cols).
        where: the message prefix (kernel name and case).

    Raises:
        AssertionError: naming the program, the rule and what it did instead.
    """
    problem = _strays(ledger, 1, "the input and output rows")
    if problem:
        raise AssertionError(f"{where}: {problem}")
    by_program: dict[int, list[np.ndarray]] = {}
    for a in ledger.of("input"):
        by_program.setdefault(a.program[0], []).append(a.index)
    for a in ledger.of("output", WRITES):
        rows = a.index // y_width
        other = rows[rows != a.program[0]]
        if other.size:
            raise AssertionError(
                f"{where}: program {a.program[0]} wrote row {int(other[0])} of the output. Notebook 04 "
                f"asks for one program per row: program i writes row i only.")
    for a in ledger.of("output"):
        raise AssertionError(
            f"{where}: program {a.program[0]} read from the output. Notebook 04 asks for one read of the "
            f"input and one write of the output; keep everything in between in registers.")
    for p in range(n_rows):
        idx = np.concatenate(by_program.get(p, [np.zeros(0, np.int64)]))
        c = idx - p * x_width                       # offset from the start of the program's own row
        own = (c >= 0) & (c < n_cols)
        past = (c >= n_cols) & (c < max(block_size, n_cols + 1))
        other = ~own & ~past
        if other.any():
            rows = np.unique(idx[other] // x_width)
            rows = rows[rows != p]
            what = (f"row(s) {value_span(rows)} of the input" if rows.size and rows.max() < n_rows
                    else "memory past the last row of the input")
            raise AssertionError(
                f"{where}: program {p} read {what}. Notebook 04 asks for one program per row: program "
                f"i reads row i only (grid (n_rows,)), so the rows are spread over the GPU's cores "
                f"instead of one program looping over them.")
        if past.any():
            raise AssertionError(
                f"{where}: program {p} read {int(past.sum())} element(s) past the end of its row (columns "
                f"{value_span(c[past])}, but n_cols = {n_cols}). Mask the load with cols < n_cols and "
                f"other=-inf: an unmasked load followed by tl.where still reads memory that is not the "
                f"row's (on a GPU, another row, or past the end of the tensor).")
        counts = np.bincount(c[own], minlength=n_cols)
        if counts.max(initial=0) > 1:
            col = int(np.argmax(counts))
            raise AssertionError(
                f"{where}: program {p} read column {col} of its row {int(counts[col])} times. Notebook 04 "
                f"asks for one read of the row: load it once as one block, then take the max, the "
                f"exponentials, the sum and the quotient in registers (each extra pass over memory "
                f"costs as much as the whole kernel should).")
        if (counts == 0).any():
            raise AssertionError(
                f"{where}: program {p} read {int((counts > 0).sum())} of the {n_cols} columns of its row "
                f"(never columns {value_span(np.nonzero(counts == 0)[0])}). Notebook 04 asks for the whole "
                f"row as one block of BLOCK_SIZE = next_power_of_2(n_cols) = {block_size} columns; a "
                f"fixed block size is right only up to that width.")
    for a in ledger.of("input", WRITES):
        raise AssertionError(f"{where}: program {a.program[0]} wrote into the input (an atomic writes too); a "
                             f"kernel may only store to the output.")


# ---------------------------------------------------------------------------------------------- 05
def check_flash_reads(ledger: Ledger, *, BH: int, T: int, D: int, causal: bool, block_m: int,
                      block_n: int, where: str) -> None:
    """Notebook 05's rules for K and V (contiguous (B, H, T, D) buffers named ``K`` and ``V``):
    program (m, bh) reads keys of head bh only, below T; at most ``block_n`` keys per load; each
    element at most once (one pass, with the online rescale); and, causal, no tile whose keys all
    lie past the program's last query row (those tiles are skipped, not loaded and masked).

    Raises:
        AssertionError: naming the program, the rule and what it did instead.
    """
    problem = _strays(ledger, 2, "Q, K, V, O and LSE")
    if problem:
        raise AssertionError(f"{where}: {problem}")
    seen: dict[tuple, list[np.ndarray]] = {}
    for name in ("K", "V"):
        for a in ledger.of(name):
            m, bh = a.program[0], a.program[1]
            who = program_label(a.program, 2)
            key = a.index // D - bh * T               # key index inside this program's head
            if (key >= T).any():
                raise AssertionError(
                    f"{where}: {who} loaded {name} rows {value_span(key[key >= T])}, past the last key "
                    f"(T = {T}). Mask the K and V loads with offs_n < T: rows past T belong to the next "
                    f"head or to no tensor at all, and masking only the scores does not stop the read.")
            if (key < 0).any():
                raise AssertionError(f"{where}: {who} loaded {name} rows of another (batch, head): add "
                                     f"bh * stride_bh to the K and V pointers.")
            keys = np.unique(key)
            if keys.size > block_n:
                raise AssertionError(
                    f"{where}: notebook 05 asks for key tiles of at most BLOCK_N = {block_n} keys: {who} "
                    f"loaded {keys.size} keys of {name} at once. Loop over the keys in tiles of BLOCK_N "
                    f"(a whole row of keys in one block is right only while it fits).")
            last_row = min((m + 1) * block_m, T) - 1
            if causal and keys.min() > last_row:
                raise AssertionError(
                    f"{where}: notebook 05 asks to skip the key tiles that no query of a tile can see: "
                    f"{who} (query rows {m * block_m}..{last_row}) loaded keys {value_span(keys)} of {name}, "
                    f"all after its last row. End the causal loop at min(start_m + BLOCK_M, T) instead "
                    f"of loading these tiles and masking them (they are half the work).")
            seen.setdefault((name, a.program), []).append(a.index)
    for (name, program), parts in seen.items():
        counts = np.bincount(np.concatenate(parts) - program[1] * T * D)
        if counts.max(initial=0) > 1:
            key = int(np.argmax(counts)) // D
            raise AssertionError(
                f"{where}: notebook 05 asks for one pass over the keys: {program_label(program, 2)} loaded key "
                f"{key} of {name} {int(counts.max())} times. Keep a running max and rescale l and acc "
                f"by exp(m_old - m_new) as it grows (the online softmax), instead of a first pass for "
                f"the max and a second for the sum.")


# ---------------------------------------------------------------------------------------------- 08
def _cache_position(index: np.ndarray, base: int, stride_kt: int, D: int):
    """Position t of flat element offsets in the (sequence, KV head) that starts at ``base``, and
    whether each offset lies in one of its rows (element d < D of a row ``stride_kt`` apart)."""
    rel = index - base
    return rel // stride_kt, rel % stride_kt < D


def check_decode_reads(ledger: Ledger, *, seqlens, H_kv: int, T_max: int, D: int, group: int,
                       keys_per_split: int, where: str, strides: tuple[int, int, int] | None = None) -> None:
    """Notebook 08's rules for the K and V caches ((B, H_kv, T_max, D) buffers named ``K`` and ``V``,
    at (batch, head, position) ``strides``, contiguous by default), for a split kernel launched on
    (B·H_kv, num_splits, row_blocks): program
    (bkv, split, rb) reads keys of sequence ``bkv // H_kv``, KV head ``bkv % H_kv`` only, inside its
    slice ``[split·keys_per_split, (split+1)·keys_per_split)`` and below that sequence's length
    (``seqlens[b]``); and it loads each K/V element **at most once**, so that one load serves all
    ``group`` query heads of the KV head (FlashDecoding's GQA packing: the group's g·T_q query rows
    are the BLOCK_M rows of the tile). Hence each element is read at most ``row_blocks`` times per
    launch, once in decoding (T_q = 1).

    Raises:
        AssertionError: naming the program, the rule and what it did instead.
    """
    problem = _strays(ledger, 3, "Q, K, V, SEQLENS, O_PART and LSE_PART")
    if problem:
        raise AssertionError(f"{where}: {problem}")
    strides = (H_kv * T_max * D, T_max * D, D) if strides is None else tuple(strides)
    seen: dict[tuple, list[np.ndarray]] = {}
    for name in ("K", "V"):
        for a in ledger.of(name):
            (bkv, split, _), who = a.program, program_label(a.program, 3)
            base = (bkv // H_kv) * strides[0] + (bkv % H_kv) * strides[1]
            key, in_row = _cache_position(a.index, base, strides[2], D)  # key: position in the sequence
            if (key < 0).any() or not in_row.all():
                raise AssertionError(
                    f"{where}: {who} loaded {name} of another (sequence, KV head): program (bkv, split, rb) "
                    f"reads sequence bkv // H_kv, KV head bkv % H_kv, element (b, h, t, d) at b * stride_kb + "
                    f"h * stride_kh + t * stride_kt + d. Use the three strides the launcher passes: the "
                    f"cache need not be contiguous (here its (stride_kb, stride_kh, stride_kt) are {strides}).")
            b, lo = bkv // H_kv, split * keys_per_split
            past = key >= int(seqlens[b])
            if past.any():
                raise AssertionError(
                    f"{where}: {who} loaded {name} at positions {value_span(key[past])} of sequence {b}, whose "
                    f"length is {int(seqlens[b])} (the cache holds {T_max}). Never load a key or value at "
                    f"or past SEQLENS[b]: mask the K and V loads (masking the scores does not stop the "
                    f"read; there the cache holds stale data, NaN, or nothing at all).")
            outside = (key < lo) | (key >= lo + keys_per_split)
            if outside.any():
                raise AssertionError(
                    f"{where}: {who} loaded keys {value_span(key[outside])} of {name}, outside its slice "
                    f"{lo}..{lo + keys_per_split - 1}: each split's program reads its own slice of the "
                    f"keys only (split-K), so every key is read by one program.")
            seen.setdefault((name, a.program), []).append(a.index)
    for (name, program), parts in seen.items():
        index, counts = np.unique(np.concatenate(parts), return_counts=True)
        n = int(counts.max(initial=0))
        if n > 1:
            base = (program[0] // H_kv) * strides[0] + (program[0] % H_kv) * strides[1]
            key = int(_cache_position(index[np.argmax(counts)], base, strides[2], D)[0])
            why = (f"one pass over the slice per query head of the group (g = {group})" if n == group > 1
                   else "more than one pass over the slice")
            raise AssertionError(
                f"{where}: notebook 08 asks for each K/V tile to be loaded once for the whole GQA group: "
                f"{program_label(program, 3)} loaded key {key} of {name} {n} times, as {why} does. Make the "
                f"g·T_q (query head, query) rows of the group the BLOCK_M rows of one Q tile, so that one "
                f"tl.load of each K/V tile and one tl.dot serve every head of the group: decoding time is "
                f"the time to read the cache, and each extra pass reads it again.")
