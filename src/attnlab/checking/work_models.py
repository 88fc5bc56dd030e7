"""The work each graded kernel's method implies, declared as data, and one comparison with the ledger.

A notebook that grades a Triton kernel declares here, per launch, a :class:`KernelModel`: for each
tensor the kernel may read, which elements each program may touch, how many it needs (an
:class:`InputModel`: the *need* of the method, tile-rounded, so that every honest tile size, loop
order and masked tail meets it exactly), the largest tile, how many loads a tile may take; the
tensors it may write; and the ``tl.dot`` FLOPs the case needs, with the share that must go through
``tl.dot``. :func:`check_work` compares a :class:`attnlab.checking.loads.Ledger` with those numbers, the same
way for every notebook, and fails with a message that names the rule and the figure measured
("notebook 07 asks the dQ program ... to skip the key tiles past the diagonal: program (0, 0) read
2.0x the keys of K a causal tile needs"). A new notebook gets the method check by declaring its
model; a new trick breaks one of the figures, whatever code it is written with.

The rules, in the order they are checked (the first broken one is reported):

1. *reach*: a program reads only the elements its model allows (its rows, its head, its slice,
   below the sequence's length), writes only the outputs; no lane outside every tensor, nothing
   unaccounted (:attr:`attnlab.checking.loads.Launch.unaccounted`);
2. *balance*: every program with work to do reads its share (none idles while another does its work);
3. *volume*: per program, the units read (keys, rows, columns; atomics count: they read) are at
   most ``factor`` times the need: a second pass, a reload per head, a tile past the diagonal all
   raise the figure;
4. *tiles*: no access reads more than ``tile`` units at once (a whole row of keys as one block);
5. *tensor cores*: the ``tl.dot`` FLOPs whose results reach an output (a stored value derives from
   them: :meth:`attnlab.checking.loads.Launch.feeding`) are at least ``dot_share`` of the products the case needs,
   and all ``tl.dot`` FLOPs at most ``dot_slack`` times those of the tiles the method visits (tiles past the diagonal
   loaded fully masked, and multiplied, are work the method skips); and *per product* (:class:`Product`:
   S = QKᵀ and PV; in 07 also dP, dV, dK, dQ), each one's own FLOPs, on live lanes (zero padding of a
   loaded or constant operand multiplies nothing), at least ``dot_share`` through ``tl.dot`` calls whose
   operands, by the tensors they were loaded from, make them that product: one product padded or
   repeated does not stand in for another;
6. *iterations*: at most ``loads_per_tile`` read calls per tile needed (one key per loop iteration).

A launch may have alternatives (:func:`check_work` takes a tuple of designs, e.g. notebook 07's dQ
computed by its own kernel or added with atomics by the dK/dV kernel): the kernels pass if one
design holds; otherwise the design with the fewest broken rules is reported.
"""
# Length: A catalogue: each graded kernel's work model as data, and the one comparison with the
# ledger.

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .loads import READS, WRITES, Launch, Ledger, program_label, value_span

__all__ = ["InputModel", "KernelModel", "Product", "product_flops", "forward_products", "backward_products", "check_work", "work_violations", "softmax_model", "flash_forward_model",
           "backward_designs", "decode_partial_model", "decode_merge_model"]


@dataclass(frozen=True)
class InputModel:
    """What one program of a launch may and should read of one tensor.

    Attributes:
        tensor: the buffer's name in the ledger.
        unit: what one unit is called in messages ("key", "query row", "column").
        unit_size: elements per unit (D for a row of keys; 1 for a column or a scalar per row).
        unit_of: int64 array over the buffer's elements: the unit (a global row id) each element
            belongs to, -1 for elements in no unit (padding, spare room after the tensor).
        lo, hi: int arrays of the grid's shape: program p may read units ``lo[p] <= u < hi[p]``.
        need: int array of the grid's shape: units program p needs, as the method reads them
            (tile-rounded; 0 for a program with nothing to read).
        factor: the most units read per unit needed (None: no limit, e.g. a scalar read in a loop).
        tile: the most units one access may read (None: any).
        loads_per_tile: the most read calls per ``tile`` units needed (None: any).
        rule: what the method asks of this tensor, completing "asks <role> to ...".
        need_what: what the need is, completing "read 2.0x the <unit>s of <tensor> ...".
    """

    tensor: str
    unit: str
    unit_size: int
    unit_of: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    need: np.ndarray
    factor: float | None = 1.0
    tile: int | None = None
    loads_per_tile: float | None = None
    rule: str = "read it once"
    need_what: str = "it needs"


@dataclass(frozen=True)
class Product:
    """One matrix product a kernel's method asks for through ``tl.dot``, named by its operands.

    A ``tl.dot`` is this product when one operand was loaded from (derives from) every tensor of one
    side's ``has`` and none of its ``not_``, and the other operand the same of the other side, in either
    order (``tl.dot(q, kᵀ)`` and ``tl.dot(k, qᵀ)`` are both S = QKᵀ): the ledger tags each loaded value
    with its tensor, every operation passes the tags on (:func:`attnlab.checking.flow.sources`).

    Attributes:
        name: how messages call it ("S = QKᵀ").
        left, right: (has, not_) pairs of tensor-name tuples.
        flops: int array of the grid's shape: the FLOPs each program needs of it (2·D per visible pair).
    """

    name: str
    left: tuple
    right: tuple
    flops: np.ndarray

    def matches(self, operands) -> bool:
        a, b = operands

        def fits(src, side):
            has, not_ = side
            return set(has) <= src and not set(not_) & src
        return (fits(a, self.left) and fits(b, self.right)) or (fits(b, self.left) and fits(a, self.right))


def product_flops(launch: Launch, products, outputs) -> dict:
    """(program, product name) -> the live FLOPs (:attr:`attnlab.checking.loads.Dot.live`) of the ``tl.dot``
    calls identified as that product whose results reach ``outputs``; ``(program, None)``: those that are
    none of ``products``."""
    got: dict = {}
    for d in launch.feeding(outputs):
        name = next((pr.name for pr in products if pr.matches(d.operands)), None)
        live = d.live if d.live >= 0 else d.flops
        got[(d.program, name)] = got.get((d.program, name), 0) + live
    return got


@dataclass(frozen=True)
class KernelModel:
    """The work one launch's method implies.

    Attributes:
        notebook: "04", "05"...; kernel: the kernel's name in messages; role: how the notebook names
            one program ("the program of a key tile").
        inputs: the tensors it may read (an atomic reads and writes: a tensor updated by atomics is
            in ``inputs`` and ``outputs``).
        outputs: the tensors it may write.
        dot_flops: int array of the grid's shape: the FLOPs of the products each program needs
            (the visible (query, key) pairs times 2·D per product), None when no product is asked for.
        dot_share: the least fraction of ``dot_flops`` that must go through ``tl.dot``.
        dot_cap: int array of the grid's shape: the ``tl.dot`` FLOPs of the tiles the method visits
            (whole tiles, padding included), None for no upper bound; ``dot_slack`` the factor allowed.
        dot_rule: what the notebook asks of the products, completing "asks <role> to ...".
        dims: how many grid axes name a program in messages.
        products: the products, each of which must have ``dot_share`` of its own FLOPs, on live lanes,
            through ``tl.dot`` (one product pushed through a padded or repeated ``tl.dot`` does not
            stand in for another).
    """

    notebook: str
    kernel: str
    role: str
    inputs: tuple[InputModel, ...]
    outputs: tuple[str, ...]
    dot_flops: np.ndarray | None = None
    dot_share: float = 0.9
    dot_cap: np.ndarray | None = None
    dot_slack: float = 1.5
    dot_rule: str = "multiply tiles with tl.dot"
    dims: int = 2
    products: tuple = ()


class _Found(list):
    """Violations as (rule, message): ``append`` takes the message and tags it with the current rule."""

    rule = 1

    def append(self, message: str) -> None:
        super().append((self.rule, message))


def _reads_by_program(launch: Launch):
    """(program, tensor) -> list of read accesses; (program, tensor) -> list of write accesses."""
    reads, writes = {}, {}
    for a in launch.accesses:
        if a.kind in READS:
            reads.setdefault((a.program, a.tensor), []).append(a)
        if a.kind in WRITES:
            writes.setdefault((a.program, a.tensor), []).append(a)
    return reads, writes


def work_violations(launch: Launch, model: KernelModel) -> list[str]:
    """Every rule of ``model`` that ``launch`` breaks, one message each (first program found), in
    the order of the module's rules. The messages of rule 1 (reach) come first, and alone."""
    return [message for _, message in _violations(launch, model)]


def _violations(launch: Launch, model: KernelModel) -> list[tuple[int, str]]:
    out = _Found()
    asks = f"notebook {model.notebook} asks {model.role}"
    dims = model.dims
    reads, writes = _reads_by_program(launch)
    inputs = {m.tensor: m for m in model.inputs}
    for p, kind, n in launch.strays[:1]:
        verb = {"load": "read", "store": "wrote"}.get(kind, "updated")
        out.append(f"{program_label(p, dims)} of {model.kernel} {verb} {n} element(s) outside every tensor it was given: "
                   f"an address that is off, or an access without a mask (on a GPU, memory the kernel does not "
                   f"own)")
    if launch.unaccounted:
        out.append(f"{model.kernel} used {sorted(set(launch.unaccounted))[0]}, a memory access the work ledger "
                   f"cannot measure; use tl.load and tl.store")
    # 1. reach
    for (p, tensor), accs in writes.items():
        if tensor not in model.outputs:
            kinds = {a.kind for a in accs}
            how = "with an atomic (an atomic reads and writes)" if "atomic" in kinds else "with tl.store"
            out.append(f"{program_label(p, dims)} of {model.kernel} wrote into {tensor} {how}: the kernel may only "
                       f"write {', '.join(model.outputs)}")
            break
    for (p, tensor), accs in reads.items():
        m = inputs.get(tensor)
        if m is None:
            out.append(f"{program_label(p, dims)} of {model.kernel} read {tensor}, which its method never reads "
                       f"(it reads {', '.join(inputs) or 'nothing'})")
            break
        units = m.unit_of[np.concatenate([a.index for a in accs])]
        bad = (units < m.lo[p]) | (units >= m.hi[p])
        if bad.any():
            known = np.unique(units[bad & (units >= 0)])
            what = (f"{known.size} other {m.unit}(s), at offsets {value_span(known - m.lo[p])} from its first one"
                    if known.size else f"{int(bad.sum())} element(s) that belong to no {m.unit} (padding or past "
                                       f"the end)")
            out.append(f"{asks} to read only its own {m.unit}s of {tensor} ({int(m.hi[p] - m.lo[p])} of them): "
                       f"{program_label(p, dims)} read {what}. Each program works on the tile tl.program_id gives it")
            break
    if out:
        return out
    out.rule = 2
    # 2. balance: a program with work that read nothing, while another read more than its share
    for m in model.inputs:
        got = {p: sum(a.index.size for a in reads.get((p, m.tensor), [])) / m.unit_size for p in launch.programs()}
        idle = [p for p in launch.programs() if m.need[p] > 0 and got[p] == 0]
        busy = [p for p in launch.programs() if got[p] > m.need[p]]
        if idle and busy:
            p = max(busy, key=lambda q: got[q] - m.need[q])
            out.append(f"{asks} to {m.rule}, each program its own share: {program_label(p, dims)} read "
                       f"{got[p]:g} {m.unit}s of {m.tensor} while {len(idle)} program(s) with work to do "
                       f"({program_label(idle[0], dims)}...) read none. Spread the tiles over the grid: "
                       f"tl.program_id picks each program's tile")
            return out
    out.rule = 3
    # 3. volume
    for m in model.inputs:
        if m.factor is None:
            continue
        for p in launch.programs():
            got = sum(a.index.size for a in reads.get((p, m.tensor), [])) / m.unit_size
            need = int(m.need[p])
            if got > m.factor * need + 1e-9:
                ratio = f"{got / need:.1f}x the {m.unit}s of {m.tensor} {m.need_what}" if need else \
                    f"{got:g} {m.unit}s of {m.tensor} where it needs none"
                out.append(f"{asks} to {m.rule}: {program_label(p, dims)} read {ratio} ({got:g} read, {need} needed; "
                           f"every tl.load and atomic counts)")
                break
    # 4. tiles
    for m in model.inputs:
        if m.tile is None:
            continue
        for (p, tensor), accs in reads.items():
            if tensor != m.tensor:
                continue
            widest = max(accs, key=lambda a: np.unique(m.unit_of[a.index]).size)
            n = int(np.unique(m.unit_of[widest.index]).size)
            if n > m.tile:
                out.append(f"{asks} to read {m.tensor} in tiles of at most {m.tile} {m.unit}s: {program_label(p, dims)} "
                           f"read {n} {m.unit}s in one access (a block of shape {widest.shape}). Loop over the "
                           f"{m.unit}s one tile at a time")
                break
    # 5. tensor cores
    out.rule = 5
    if model.dot_flops is not None:
        done: dict = {}
        for d in launch.dots:
            done[d.program] = done.get(d.program, 0) + d.flops
        useful: dict = {}  # the products whose results reach an output: a product thrown away is no work done
        for d in launch.feeding(model.outputs):
            useful[d.program] = useful.get(d.program, 0) + d.flops
        for p in launch.programs():
            need, got = int(model.dot_flops[p]), useful.get(p, 0)
            if need and got < model.dot_share * need:
                lost = (f"; {done.get(p, 0) - got} more FLOPs of tl.dot went into results never stored to "
                        f"{', '.join(model.outputs)}") if done.get(p, 0) > got else ""
                out.append(f"{asks} to {model.dot_rule}: {program_label(p, dims)} did {got / need:.0%} of the "
                           f"products its tiles need through tl.dot ({got} of {need} FLOPs; at least "
                           f"{model.dot_share:.0%}{lost}). Element-wise products summed with tl.sum take no "
                           f"tensor core, and a tl.dot counts only when the output is computed from its result: "
                           f"multiply whole tiles with tl.dot and use the products")
                break
        if not out or out[-1][0] != 5:
            check_products(launch, model, out, asks)
        for p in launch.programs() if model.dot_cap is not None else ():
            cap = int(model.dot_cap[p])
            if done.get(p, 0) > model.dot_slack * cap:
                out.append(f"{asks} to {model.dot_rule}, only on the tiles its method visits: {program_label(p, dims)} "
                           f"multiplied {done.get(p, 0) / max(cap, 1):.1f}x their FLOPs ({done.get(p, 0)} against "
                           f"{cap}): tiles loaded masked and multiplied anyway are work to skip")
                break
    # 6. iterations
    out.rule = 6
    for m in model.inputs:
        if m.loads_per_tile is None or m.tile is None:
            continue
        for p in launch.programs():
            calls = len(reads.get((p, m.tensor), []))
            tiles = -(-int(m.need[p]) // m.tile)
            if calls > m.loads_per_tile * max(tiles, 1):
                units = sum(a.index.size for a in reads.get((p, m.tensor), [])) / m.unit_size
                out.append(f"{asks} to read {m.tensor} a tile of up to {m.tile} {m.unit}s per loop iteration: "
                           f"{program_label(p, dims)} read it in {calls} pieces ({units / calls:.1f} {m.unit}s each on "
                           f"average) where {tiles} tile(s) would do")
                break
    return out


def check_products(launch: Launch, model: KernelModel, out: _Found, asks: str) -> None:
    """Rule 5, product by product: each of ``model.products`` has ``dot_share`` of its FLOPs, on live
    lanes, through ``tl.dot`` calls whose operands make it that product and whose results reach an output."""
    if not model.products:
        return
    got = product_flops(launch, model.products, model.outputs)
    for p in launch.programs():
        for pr in model.products:
            need, have = int(pr.flops[p]), got.get((p, pr.name), 0)
            if not need or have >= model.dot_share * need:
                continue
            others = [f"{q.name} {got[(p, q.name)] / max(int(q.flops[p]), 1):.0%} of its need"
                      for q in model.products if q is not pr and got.get((p, q.name), 0)]
            if got.get((p, None)):
                others.append(f"{got[(p, None)]} FLOPs to products of other operands")
            mine = [d for d in launch.dots if d.program == p and d.live >= 0 and pr.matches(d.operands)]
            padded, total = sum(d.flops - d.live for d in mine), sum(d.flops for d in mine)
            where = f"; its tl.dot calls went to {', '.join(others)}" if others else ""
            pad = (f"; {padded} of the {total} FLOPs of its tl.dot calls for {pr.name} fell on zero-padded lanes, "
                   f"which multiply nothing") if padded else ""
            out.append(f"{asks} to {model.dot_rule}: {program_label(p, dims=model.dims)} did {have / need:.0%} of the "
                       f"product {pr.name} through tl.dot ({have} of {need} FLOPs, {need - have} short of all; at "
                       f"least {model.dot_share:.0%} of each product){where}{pad}. Each product counts on its own, "
                       f"identified by what its operands were loaded from: one product through tl.dot (padded with "
                       f"zeros, or repeated) does not stand in for another computed element-wise")
            return


def check_work(ledger: Ledger, designs, *, where: str) -> None:
    """Compare every launch of ``ledger`` with its model; fail on the first broken rule.

    Args:
        ledger: from :func:`attnlab.checking.loads.record`, one launch per model.
        designs: a tuple of :class:`KernelModel` (one per launch, in launch order), or a tuple of
            such tuples (alternative designs: the launches pass if one of them holds).
        where: the message prefix (kernel and case).

    Raises:
        AssertionError: ``where``, then the rule broken, the program and the figure measured.
    """
    if designs and isinstance(designs[0], KernelModel):
        designs = (designs,)
    best = None
    for models in designs:
        if len(ledger.launches) != len(models):
            found = [(1, f"{len(ledger.launches)} launch(es) where the launcher makes {len(models)}")]
        else:
            found = [v for launch, model in zip(ledger.launches, models) for v in _violations(launch, model)]
        if not found:
            return
        # the design the kernels follow: the fewest tensors read or written against it, then the fewest rules broken
        score = (sum(rule == 1 for rule, _ in found), len(found))
        if best is None or score < best[0]:
            best = (score, found)
    raise AssertionError(f"{where}: {best[1][0][1]}.")


# ----------------------------------------------------------------------------------- the models
def _grid(shape) -> np.ndarray:
    return np.zeros(tuple(shape) + (1,) * (3 - len(shape)), dtype=np.int64)


def _rows(n_units: int, unit_size: int, buffer_len: int) -> np.ndarray:
    """unit_of for a buffer of ``n_units`` contiguous rows of ``unit_size`` elements (then spare room)."""
    out = np.full(buffer_len, -1, dtype=np.int64)
    out[:n_units * unit_size] = np.arange(n_units * unit_size) // unit_size
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _keys_needed(end: int, tile: int, T: int) -> int:
    """Keys 0..end-1 needed, read in whole tiles of ``tile`` keys masked at T: min(roundup(end), T)."""
    return min(_cdiv(end, tile) * tile, T) if end > 0 else 0


def forward_products(flops: np.ndarray) -> tuple[Product, Product]:
    """S = QKᵀ and PV, each half of the forward's FLOPs."""
    return (Product("S = QKᵀ", (("Q",), ("K", "V")), (("K",), ("Q", "V")), flops // 2),
            Product("P V", (("Q", "K"), ("V",)), (("V",), ("Q", "K")), flops // 2))


#: notebook 07's products: (name, one operand (has, not), the other (has, not)); dS derives from everything
_GRADS = ("Q", "K", "V", "DO")
_BACKWARD = {"S": ("S = QKᵀ", (("Q",), ("K", "V", "DO")), (("K",), ("Q", "V", "DO"))),
             "dP": ("dP = dO Vᵀ", (("DO",), ("Q", "K", "V")), (("V",), ("Q", "K", "DO"))),
             "dV": ("dV = Pᵀ dO", (("Q", "K"), ("V", "DO")), (("DO",), ("Q", "K", "V"))),
             "dK": ("dK = dSᵀ Q", (_GRADS, ()), (("Q",), ("K", "V", "DO"))),
             "dQ": ("dQ = dS K", (_GRADS, ()), (("K",), ("Q", "V", "DO")))}


def backward_products(names, flops: np.ndarray) -> tuple[Product, ...]:
    return tuple(Product(*_BACKWARD[n], flops) for n in names)


def softmax_model(*, n_rows: int, n_cols: int, x_width: int, block: int, x_len: int) -> tuple[KernelModel]:
    """Notebook 04: program i reads the n_cols columns of input row i once, in one block of at most
    BLOCK_SIZE columns, and writes the output only (no products)."""
    unit_of = np.full(x_len, -1, dtype=np.int64)
    r, c = np.divmod(np.arange(min(x_len, n_rows * x_width)), x_width)
    inside = c < n_cols
    unit_of[:r.size][inside] = (r * n_cols + c)[inside]
    lo, hi, need = _grid((n_rows,)), _grid((n_rows,)), _grid((n_rows,))
    lo[:, 0, 0] = np.arange(n_rows) * n_cols
    hi[:, 0, 0] = lo[:, 0, 0] + n_cols
    need[:] = n_cols
    row = InputModel("input", "column", 1, unit_of, lo, hi, need, factor=1.0, tile=block,
                     rule="read its row once, as one block", need_what="of its row")
    return (KernelModel("04", "_softmax_kernel", "each program (one per row)", (row,), ("output",), dims=1),)


def _visible(T: int, causal: bool) -> np.ndarray:
    """(T, T) bool: query i sees key j."""
    return np.tril(np.ones((T, T), dtype=bool)) if causal else np.ones((T, T), dtype=bool)


def flash_forward_model(*, B: int, H: int, T: int, D: int, causal: bool, block_m: int, block_n: int,
                        buffer_len: int) -> tuple[KernelModel]:
    """Notebook 05: program (m, bh) reads its BLOCK_M rows of Q once, and K and V of head bh once
    each, in tiles of at most BLOCK_N keys, up to its last row's key when causal (the tiles past the
    diagonal skipped); QKᵀ and PV through ``tl.dot``. ``buffer_len``: elements of each input's buffer."""
    BH, n_m = B * H, _cdiv(T, block_m)
    lo_q, hi_q, need_q = _grid((n_m, BH)), _grid((n_m, BH)), _grid((n_m, BH))
    lo_k, hi_k, need_k, flops = _grid((n_m, BH)), _grid((n_m, BH)), _grid((n_m, BH)), _grid((n_m, BH))
    cap = _grid((n_m, BH))
    vis = _visible(T, causal)
    for m in range(n_m):
        start, stop = m * block_m, min((m + 1) * block_m, T)
        keys = _keys_needed(stop, block_n, T) if causal else T
        pairs = int(vis[start:stop].sum())
        for bh in range(BH):
            lo_q[m, bh], hi_q[m, bh], need_q[m, bh] = bh * T + start, bh * T + stop, stop - start
            lo_k[m, bh], hi_k[m, bh], need_k[m, bh] = bh * T, bh * T + T, keys
            flops[m, bh] = 4 * D * pairs  # S = Q Kᵀ and P V, 2·D FLOPs per visible (query, key) pair each
            cap[m, bh] = 4 * D * block_m * _cdiv(keys, block_n) * block_n
    unit_of = _rows(BH * T, D, buffer_len)
    skip = " and skip the key tiles past the diagonal" if causal else ""
    kv = dict(factor=1.0, tile=block_n, loads_per_tile=2.0, rule=f"read each K/V tile once{skip}",
              need_what="a causal query tile needs" if causal else "of its head (each once)")
    inputs = (InputModel("Q", "query row", D, unit_of, lo_q, hi_q, need_q, tile=block_m,
                         rule="read its own query rows once", need_what="of its tile"),
              InputModel("K", "key", D, unit_of, lo_k, hi_k, need_k, **kv),
              InputModel("V", "key", D, unit_of, lo_k, hi_k, need_k, **kv))
    return (KernelModel("05", "_flash_fwd_kernel", "each program (one per query tile and head)", inputs,
                        ("O", "LSE"), dot_flops=flops, dot_cap=cap,
                        dot_rule="compute S = QKᵀ and PV with tl.dot, tile by tile", products=forward_products(flops)),)


def backward_designs(*, B: int, H: int, T: int, D: int, causal: bool, block_m: int, block_n: int,
                     buffer_len: int, row_len: int):
    """Notebook 07's launches (preprocess, dK/dV, dQ) as launched by ``run_backward_kernels``, in its
    two designs: dQ by its own kernel, or added with atomics into DQ_ACC by the dK/dV kernel.

    The dK/dV program (n, bh) owns keys n·block_n...: reads its K/V tile once, walks the query tiles
    in steps of block_m from the one holding its first key when causal (each Q, dO, LSE, Δ row
    once), and multiplies through ``tl.dot``; the dQ program (m, bh) owns block_n queries and walks
    the key tiles in steps of block_m up to its diagonal when causal. ``buffer_len``/``row_len``:
    elements of each (B, H, T, D) and (B, H, T) buffer.
    """
    BH, n_t = B * H, _cdiv(T, block_n)
    rows_d, rows_1 = _rows(BH * T, D, buffer_len), _rows(BH * T, 1, row_len)
    vis = _visible(T, causal)
    g = lambda: _grid((n_t, BH))  # noqa: E731
    own_lo, own_hi, own = g(), g(), g()          # the program's own tile (keys for dK/dV, queries for dQ)
    head_lo, head_hi = g(), g()
    walk_q, walk_k = g(), g()                    # query rows the dK/dV program walks; keys the dQ program walks
    pairs_k, pairs_q = g(), g()                  # visible pairs of the key tile; of the query tile
    tiles_k, tiles_q = g(), g()                  # FLOPs of one product over the tiles each program visits
    for n in range(n_t):
        start, stop = n * block_n, min((n + 1) * block_n, T)
        first_q = (start // block_m) * block_m if causal else 0
        keys = _keys_needed(stop, block_m, T) if causal else T
        for bh in range(BH):
            own_lo[n, bh], own_hi[n, bh], own[n, bh] = bh * T + start, bh * T + stop, stop - start
            head_lo[n, bh], head_hi[n, bh] = bh * T, bh * T + T
            walk_q[n, bh], walk_k[n, bh] = T - first_q, keys
            # the tiles visited, whole: (own tile) x (steps of block_m) x D, per product
            tiles_k[n, bh] = 2 * D * block_n * _cdiv(T - first_q, block_m) * block_m
            tiles_q[n, bh] = 2 * D * block_n * _cdiv(keys, block_m) * block_m
            pairs_k[n, bh], pairs_q[n, bh] = int(vis[:, start:stop].sum()), int(vis[start:stop].sum())
    skip_q = " from the one holding its first key (the tiles above the diagonal skipped)" if causal else ""
    skip_k = " up to its diagonal (the tiles past it skipped)" if causal else ""
    walk = dict(loads_per_tile=2.0, tile=block_m)

    def tile(name, rows, unit_size, unit):
        return InputModel(name, unit, unit_size, rows, own_lo, own_hi, own, tile=block_n,
                          rule=f"read its own tile of {name} once", need_what="of its tile")

    def walked(name, rows, unit_size, unit, need, rule, need_what):
        return InputModel(name, unit, unit_size, rows, head_lo, head_hi, need, rule=rule, need_what=need_what, **walk)

    pre = KernelModel("07", "_bwd_preprocess_kernel", "the preprocess program (one per query tile)",
                      (tile("O", rows_d, D, "row"), tile("DO", rows_d, D, "row")), ("DELTA",))
    dkdv_rule = f"walk the query tiles{skip_q}, each once"
    dkdv_what = "a causal key tile needs" if causal else "of its head (each once)"
    dkdv_inputs = (tile("K", rows_d, D, "key"), tile("V", rows_d, D, "key"),
                   *(walked(t, rows_d, D, "query row", walk_q, dkdv_rule, dkdv_what) for t in ("Q", "DO")),
                   *(walked(t, rows_1, 1, "query row", walk_q, dkdv_rule, dkdv_what) for t in ("LSE", "DELTA")))
    role_kv = "the dK/dV program (one per key tile and head)"
    dot_rule = "compute its products (S, dP, and dV, dK, dQ sums) with tl.dot, tile by tile"
    dkdv = KernelModel("07", "_bwd_dkdv_kernel", role_kv, dkdv_inputs, ("DK", "DV"),
                       dot_flops=8 * D * pairs_k, dot_cap=4 * tiles_k, dot_rule=dot_rule,  # S, dV, dP, dK
                       products=backward_products(("S", "dP", "dV", "dK"), 2 * D * pairs_k))
    dq_rule = f"walk the key tiles{skip_k}, each once"
    dq = KernelModel("07", "_bwd_dq_kernel", "the dQ program (one per query tile and head)",
                     (*(tile(t, rows_d, D, "query row") for t in ("Q", "DO", "DQ_ACC")),  # DQ_ACC: zeros here
                      *(tile(t, rows_1, 1, "query row") for t in ("LSE", "DELTA")),
                      *(walked(t, rows_d, D, "key", walk_k, dq_rule,
                               "a causal query tile needs" if causal else "of its head (each once)")
                        for t in ("K", "V"))),
                     ("DQ",), dot_flops=6 * D * pairs_q, dot_cap=3 * tiles_q, dot_rule=dot_rule,  # S, dP, dQ
                     products=backward_products(("S", "dP", "dQ"), 2 * D * pairs_q))
    # dQ by atomics: the dK/dV program also forms dS K for each query tile it walks and adds it into
    # DQ_ACC (an atomic reads and writes those rows); the dQ program only scales its rows of DQ_ACC
    acc = walked("DQ_ACC", rows_d, D, "query row", walk_q, dkdv_rule, dkdv_what)
    dkdv_atomic = KernelModel("07", "_bwd_dkdv_kernel", role_kv, dkdv_inputs + (acc,), ("DK", "DV", "DQ_ACC"),
                              dot_flops=10 * D * pairs_k, dot_cap=5 * tiles_k, dot_rule=dot_rule,
                              products=backward_products(("S", "dP", "dV", "dK", "dQ"), 2 * D * pairs_k))
    dq_copy = KernelModel("07", "_bwd_dq_kernel", "the dQ program (one per query tile and head)",
                          (tile("DQ_ACC", rows_d, D, "query row"),), ("DQ",))
    return (pre, dkdv, dq), (pre, dkdv_atomic, dq_copy)


def decode_partial_model(*, seqlens, H_q: int, H_kv: int, T_q: int, T_max: int, D: int, causal: bool,
                         block_m: int, block_n: int, num_splits: int, keys_per_split: int, row_blocks: int,
                         strides: tuple[int, int, int], kv_len: int, q_len: int) -> tuple[KernelModel]:
    """Notebook 08's split kernel on grid (B·H_kv, num_splits, row_blocks): program (bkv, s, rb)
    reads its block of the group's g·T_q query rows once, and the keys of its slice
    [s·keys_per_split, (s+1)·keys_per_split) of sequence bkv // H_kv, KV head bkv % H_kv, below that
    sequence's length, each K/V element once for the whole group, in tiles of at most BLOCK_N keys;
    QKᵀ and PV through ``tl.dot``. ``strides``: the caches' (batch, head, position) strides."""
    B, g = len(seqlens), H_q // H_kv
    shape = (B * H_kv, num_splits, row_blocks)
    # unit_of for the caches: element b·sb + h·sh + t·st + d (d < D) is key (b·H_kv + h)·T_max + t
    unit_of = np.full(kv_len, -1, dtype=np.int64)
    b, h, t, d = np.meshgrid(np.arange(B), np.arange(H_kv), np.arange(T_max), np.arange(D), indexing="ij")
    offs = b * strides[0] + h * strides[1] + t * strides[2] + d
    unit_of[offs.ravel()] = ((b * H_kv + h) * T_max + t).ravel()
    q_rows = _rows(B * H_q * T_q, D, q_len)
    lo_k, hi_k, need_k = _grid(shape), _grid(shape), _grid(shape)
    lo_q, hi_q, need_q, flops = _grid(shape), _grid(shape), _grid(shape), _grid(shape)
    lo_s, hi_s, cap = _grid(shape), _grid(shape), _grid(shape)
    for bkv in range(B * H_kv):
        seq, kvh = divmod(bkv, H_kv)
        n = int(seqlens[seq])
        for s in range(num_splits):
            first, end = s * keys_per_split, min((s + 1) * keys_per_split, n)
            for rb in range(row_blocks):
                r0, r1 = rb * block_m, min((rb + 1) * block_m, g * T_q)
                base_q = (seq * H_q + kvh * g) * T_q
                lo_q[bkv, s, rb], hi_q[bkv, s, rb], need_q[bkv, s, rb] = base_q + r0, base_q + r1, r1 - r0
                lo_k[bkv, s, rb], hi_k[bkv, s, rb] = bkv * T_max + first, bkv * T_max + max(first, end)
                need_k[bkv, s, rb] = max(0, end - first)
                lo_s[bkv, s, rb], hi_s[bkv, s, rb] = seq, seq + 1
                qi = np.arange(r0, r1) % T_q
                last = n - T_q + qi if causal else np.full(qi.shape, n - 1)   # each row's last visible key
                flops[bkv, s, rb] = 4 * D * int(np.clip(np.minimum(last + 1, end) - first, 0, None).sum())
                cap[bkv, s, rb] = 4 * D * block_m * _cdiv(max(0, end - first), block_n) * block_n
    kv = dict(factor=1.0, tile=block_n, loads_per_tile=2.0,
              rule="read each K/V tile of its slice once for the whole GQA group, never at or past the "
                   "sequence's length", need_what=f"of its slice (each once for the group's {g} head(s))")
    inputs = (InputModel("Q", "query row", D, q_rows, lo_q, hi_q, need_q, tile=block_m,
                         rule="read its block of the group's query rows once", need_what="of its block"),
              InputModel("K", "key", D, unit_of, lo_k, hi_k, need_k, **kv),
              InputModel("V", "key", D, unit_of, lo_k, hi_k, need_k, **kv),
              InputModel("SEQLENS", "length", 1, np.arange(B, dtype=np.int64), lo_s, hi_s, _grid(shape) + 1,
                         factor=None, rule="read its sequence's length"))
    return (KernelModel("08", "_decode_partial_kernel", "each program (one per sequence and KV head, slice "
                        "and block of rows)", inputs, ("O_PART", "LSE_PART"), dot_flops=flops, dot_cap=cap, dims=3,
                        dot_rule="compute QKᵀ and PV with tl.dot, one K/V tile at a time",
                        products=forward_products(flops)),)


def decode_merge_model(*, rows: int, num_splits: int, D: int, block_s: int, o_len: int,
                       lse_len: int) -> tuple[KernelModel]:
    """Notebook 08's merge kernel on grid (rows,): program r reads the ``num_splits`` partials of query
    row r (its O_PART rows of D elements and its LSE_PART values) and no other row's, and writes O
    and LSE only (no products). Each partial may be read at most twice: a merge that loads the
    splits as one tile and then walks them one by one is still the method. ``o_len``, ``lse_len``:
    the lengths of the buffers the ledger watches (spare room after the partials included)."""
    lo, hi, need = _grid((rows,)), _grid((rows,)), _grid((rows,))
    lo[:, 0, 0] = np.arange(rows) * num_splits
    hi[:, 0, 0] = lo[:, 0, 0] + num_splits
    need[:] = num_splits
    rule = dict(factor=2.0, tile=block_s, rule="read the partials of its own query row", need_what="of its row")
    inputs = (InputModel("O_PART", "partial", D, _rows(rows * num_splits, D, o_len), lo, hi, need, **rule),
              InputModel("LSE_PART", "partial LSE", 1, _rows(rows * num_splits, 1, lse_len), lo, hi, need, **rule))
    return (KernelModel("08", "_decode_merge_kernel", "each program (one per query row)", inputs, ("O", "LSE"),
                        dims=1),)
