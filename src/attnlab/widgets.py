"""Interactive figures for the notebooks (ipywidgets and matplotlib), with a static fallback.

- :func:`online_softmax_explorer` (notebook 01): step through an online softmax block by block
  and watch the running max m, the normaliser l and the rescale factor e^(m - m').
- :func:`causal_tile_map` (notebook 02): which (query tile, key tile) pairs a causal forward visits
  in full, masks on the diagonal, or skips, for chosen T, block_q and block_k; tiles and FLOPs saved.
- :func:`roofline_calculator` (notebook 02): bytes moved and FLOPs done by naive and fused
  attention, and where each lands on a device's roofline.

Each ``show``-style function above displays a live widget when a frontend that renders widgets
runs the kernel (JupyterLab, Notebook 7, VS Code, Google Colab) and otherwise draws one static
matplotlib figure with the given parameters (nbconvert, nbgrader's Validate, CI, a plain Python
script). The environment variable ``ATTNLAB_WIDGETS`` overrides the detection: ``0`` (or
``static``) always draws the static figure, ``1`` always builds the widget. Under the autograder
(:func:`attnlab.grading.kernel.guard.active`) they only print a note: no figure is graded.

The computations behind the figures (:func:`online_softmax_trace`, :func:`tile_classes`,
:func:`tile_summary`, :func:`attention_traffic`) are plain functions, usable and tested on their own.
"""
# Length: A catalogue: one interactive figure per notebook section, each with its static fallback.

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

__all__ = [
    "interactive_frontend", "online_softmax_trace", "online_softmax_figure", "online_softmax_widget",
    "online_softmax_explorer", "SKIP", "DIAGONAL", "FULL", "tile_classes", "tile_summary", "tile_map_figure",
    "tile_map_widget", "causal_tile_map", "attention_traffic", "roofline_figure", "roofline_widget",
    "roofline_calculator", "DEVICES",
]

#: Set to 0 (static figure) or 1 (widget) to override the frontend detection.
WIDGETS_ENV = "ATTNLAB_WIDGETS"


# ------------------------------------------------------------------------------------------ detection
def interactive_frontend() -> bool:
    """True when a widget shown now would be rendered by a live frontend.

    Detected from the request that runs the current cell: JupyterLab, Notebook 7 and VS Code send
    the cell's id with it (``cellId`` in the message metadata); nbclient, nbconvert and nbgrader do
    not. Google Colab is recognised by its module. Outside an IPython kernel, or without ipywidgets,
    the answer is False. ``ATTNLAB_WIDGETS=0|1`` overrides all of this.
    """
    forced = os.environ.get(WIDGETS_ENV, "").strip().lower()
    if forced in ("0", "off", "no", "false", "static"):
        return False
    if forced in ("1", "on", "yes", "true", "interactive") or _frontend_renders_widgets():
        # imported only now: where nothing renders widgets (nbgrader) the import is a quarter second wasted
        try:
            import ipywidgets  # noqa: F401  (only whether it imports)
        except ImportError:
            return False
        return True
    return False


def _frontend_renders_widgets() -> bool:
    ip = _ipython()
    if ip is None or getattr(ip, "kernel", None) is None:
        return False
    if "google.colab" in sys.modules:
        return True
    try:
        parent = ip.kernel.get_parent()
    except Exception:  # ipykernel < 6 has no get_parent
        parent = getattr(ip.kernel, "_parent", None) or {}
    return "cellId" in ((parent or {}).get("metadata") or {})


def _colab_widgets() -> None:
    """Colab renders ipywidgets 7 natively; ipywidgets 8 (if a learner upgraded) needs its custom manager."""
    try:
        import ipywidgets

        if int(ipywidgets.__version__.split(".")[0]) >= 8:
            from google.colab import output

            output.enable_custom_widget_manager()
    except Exception:  # rendering falls back to Colab's default manager
        pass


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def show_static(fig) -> None:
    """Display ``fig`` once in a kernel (as an image), then release it; outside IPython do nothing."""
    import matplotlib.pyplot as plt

    if _ipython() is not None:
        from IPython.display import display

        display(fig)
    plt.close(fig)


def _live(make_figure, controls: dict, note: str = "", fixed: dict | None = None):
    """A VBox of ``controls`` over an Output that redraws ``make_figure(**values, **fixed)`` on every change."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    out = w.Output()

    def redraw(**values):
        fig = make_figure(**values)
        with out:
            out.clear_output(wait=True)
            if _ipython() is not None:
                from IPython.display import display

                display(fig)
        plt.close(fig)

    def on_change(_=None):
        redraw(**{k: c.value for k, c in controls.items()}, **(fixed or {}))

    for c in controls.values():
        c.observe(on_change, names="value")
    on_change()
    row = w.HBox(list(controls.values()), layout=w.Layout(flex_flow="row wrap"))
    box = w.VBox([row, *([w.HTML(note)] if note else []), out])
    box.add_class("attnlab-widget")
    box._attnlab_redraw = on_change  # for tests: redraw without a frontend
    box._attnlab_output = out
    return box


def _display_or_static(build_widget, make_figure, params: dict, interactive: bool | None) -> None:
    """Display the widget (interactive frontends) or one static figure with ``params``; under the
    autograder, where nobody looks at it and nothing in it is graded, only a note (matplotlib's import
    and the drawing cost each graded notebook about a second)."""
    if interactive is None:
        from .grading.kernel import guard

        if guard.active():
            print("(Figure not drawn while autograding: it is not graded.)")
            return
        interactive = interactive_frontend()
    if interactive:
        if "google.colab" in sys.modules:
            _colab_widgets()
        box = build_widget()
        if _ipython() is not None:
            from IPython.display import display

            display(box)
        return
    show_static(make_figure(**params))


# ----------------------------------------------------------------------------------- 01 online softmax
@dataclass(frozen=True)
class SoftmaxStep:
    """The state after one block of an online softmax over one row.

    ``rescale`` is e^(m_old - m_new): the factor the old l is multiplied by (0 on the first block,
    where there is nothing to rescale; 1 when the block does not raise the max).
    """

    block: int
    start: int
    stop: int
    block_max: float
    m_old: float
    m_new: float
    rescale: float
    l_old: float
    block_sum: float
    l_new: float


def default_softmax_row(n: int = 40, seed: int = 0) -> np.ndarray:
    """A row whose maximum keeps rising (with a jump near the end), so the rescale factor matters."""
    rng = np.random.default_rng(seed)
    return np.linspace(-2.0, 3.0, n) + rng.normal(0.0, 1.0, n) + np.where(np.arange(n) >= n - 6, 4.0, 0.0)


def online_softmax_trace(x, block_size: int) -> list[SoftmaxStep]:
    """Every step of the one-pass (m, l) update over the 1-D row ``x`` in blocks of ``block_size``.

    Masked entries (-inf) are allowed; a block seen while the max is still -inf uses offset 0.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    m, l, steps = -math.inf, 0.0, []
    for b, start in enumerate(range(0, len(x), block_size)):
        block = x[start:start + block_size]
        bmax = float(block.max())
        m_new = max(m, bmax)
        offset = 0.0 if m_new == -math.inf else m_new
        rescale = 0.0 if m == -math.inf else math.exp(m - offset)
        bsum = float(np.exp(block - offset).sum())
        l_new = l * rescale + bsum
        steps.append(SoftmaxStep(b, start, min(start + block_size, len(x)), bmax, m, m_new, rescale, l, bsum, l_new))
        m, l = m_new, l_new
    return steps


def online_softmax_figure(x=None, block_size: int = 8, step: int | None = None):
    """The row with its blocks (seen, current, not yet seen), then m, l and the rescale factor per block.

    ``step`` is the index of the current block (default: the last one).
    """
    import matplotlib.pyplot as plt

    x = default_softmax_row() if x is None else np.asarray(x, dtype=np.float64).ravel()
    steps = online_softmax_trace(x, block_size)
    step = len(steps) - 1 if step is None else max(0, min(int(step), len(steps) - 1))
    s = steps[step]
    fig, (ax, axm, axr) = plt.subplots(3, 1, figsize=(8.5, 6.6), gridspec_kw={"height_ratios": [2.2, 1.2, 1.0]},
                                       constrained_layout=True)
    idx = np.arange(len(x))
    colors = np.where(idx < s.start, "#4c72b0", np.where(idx < s.stop, "#dd8452", "#cccccc"))
    finite = np.isfinite(x)
    ax.bar(idx[finite], x[finite], color=colors[finite], width=0.85)
    for b in steps:
        ax.axvline(b.start - 0.5, color="#999999", lw=0.6, ls=":")
    if math.isfinite(s.m_new):
        ax.axhline(s.m_new, color="#c44e52", lw=1.5, label=f"running max m' = {s.m_new:.3f}")
    if math.isfinite(s.m_old) and s.m_old != s.m_new:
        ax.axhline(s.m_old, color="#c44e52", lw=1.0, ls="--", label=f"previous m = {s.m_old:.3f}")
    ax.set_xlim(-0.5, len(x) - 0.5)
    ax.set_ylabel("x")
    ax.legend(loc="upper left", fontsize=8)
    lse_true = float(np.log(np.exp(x[finite] - x[finite].max()).sum()) + x[finite].max()) if finite.any() else -math.inf
    ax.set_title(f"block {s.block} of {len(steps) - 1}: columns [{s.start}, {s.stop})   "
                 f"l' = l·e^(m−m') + Σ e^(x−m') = {s.l_old:.3f}·{s.rescale:.3f} + {s.block_sum:.3f} = {s.l_new:.3f}",
                 fontsize=9)
    shown = steps[: step + 1]
    blocks = [b.block for b in shown]
    axm.plot(blocks, [b.m_new for b in shown], "o-", color="#c44e52", label="m (running max)")
    axm.set_ylabel("m")
    axl = axm.twinx()
    axl.plot(blocks, [b.l_new for b in shown], "s-", color="#4c72b0", label="l (normaliser)")
    axl.set_ylabel("l")
    axm.set_xlim(-0.5, len(steps) - 0.5)
    done = step == len(steps) - 1
    axm.set_title(("after the last block: m + log l = "
                   f"{s.m_new + math.log(s.l_new):.6f}, logsumexp(x) = {lse_true:.6f}") if done and s.l_new > 0
                  else "m and l after each block (the next blocks are not seen yet)", fontsize=9)
    h1, l1 = axm.get_legend_handles_labels()
    h2, l2 = axl.get_legend_handles_labels()
    axm.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    axr.bar(blocks, [b.rescale for b in shown], color="#55a868")
    axr.set_xlim(-0.5, len(steps) - 0.5)
    axr.set_ylim(0, 1.05)
    axr.set_xlabel("block")
    axr.set_ylabel("e^(m − m')")
    axr.set_title("rescale factor applied to the old l (1: the max did not move; 0: first block)", fontsize=9)
    return fig


def online_softmax_widget(x=None, block_size: int = 8):
    """The widget of :func:`online_softmax_explorer`, not displayed."""
    import ipywidgets as w

    x = default_softmax_row() if x is None else np.asarray(x, dtype=np.float64).ravel()

    size = w.IntSlider(value=block_size, min=1, max=max(1, len(x)), description="block_size",
                       continuous_update=False)
    step = w.IntSlider(value=0, min=0, max=math.ceil(len(x) / block_size) - 1, description="block",
                       continuous_update=False)

    def on_size(change):
        step.max = math.ceil(len(x) / change["new"]) - 1

    size.observe(on_size, names="value")  # registered first: the step's range is fixed before redrawing
    return _live(lambda block_size, step: online_softmax_figure(x, block_size, step),
                 {"block_size": size, "step": step},
                 "Move <b>block</b> to feed the row in one block at a time; watch m jump and l shrink by "
                 "the rescale factor whenever a block raises the max.")


def online_softmax_explorer(x=None, block_size: int = 8, interactive: bool | None = None) -> None:
    """Step through an online softmax of one row: a block slider and a block-size slider.

    Without a live frontend, draws the state after the last block (one static figure) instead.
    """
    _display_or_static(lambda: online_softmax_widget(x, block_size), online_softmax_figure,
                       dict(x=x, block_size=block_size), interactive)


# ------------------------------------------------------------------------------------ 02 causal tiles
SKIP, DIAGONAL, FULL = 0, 1, 2


def tile_classes(T_q: int, block_q: int, block_k: int, T_k: int | None = None) -> np.ndarray:
    """(n_query_tiles, n_key_tiles) array of FULL, DIAGONAL or SKIP for causal (top-left) attention.

    A tile of rows [i0, i1) and columns [j0, j1) is FULL when j1 - 1 <= i0 (no entry masked),
    SKIP when j0 > i1 - 1 (every entry masked), DIAGONAL otherwise.
    """
    T_k = T_q if T_k is None else T_k
    if min(T_q, T_k, block_q, block_k) < 1:
        raise ValueError("T_q, T_k, block_q and block_k must be >= 1")
    nq, nk = math.ceil(T_q / block_q), math.ceil(T_k / block_k)
    out = np.empty((nq, nk), dtype=np.int8)
    for a in range(nq):
        i0, i1 = a * block_q, min((a + 1) * block_q, T_q)
        for b in range(nk):
            j0, j1 = b * block_k, min((b + 1) * block_k, T_k)
            out[a, b] = FULL if j1 - 1 <= i0 else SKIP if j0 > i1 - 1 else DIAGONAL
    return out


def tile_summary(T_q: int, block_q: int, block_k: int, D: int = 64, T_k: int | None = None) -> dict:
    """Tile counts and forward FLOPs (per batch and head) of a causal forward against a non-causal one.

    FLOPs of a tile: 4 · rows · cols · D (two matmuls), done in full for every visited tile, masked or
    not; ``useful_flops`` counts only the unmasked entries (the convention behind "halved when causal").
    """
    T_k = T_q if T_k is None else T_k
    cls = tile_classes(T_q, block_q, block_k, T_k)
    rows = np.minimum(block_q, T_q - np.arange(cls.shape[0]) * block_q)[:, None]
    cols = np.minimum(block_k, T_k - np.arange(cls.shape[1]) * block_k)[None, :]
    tile_flops = 4.0 * rows * cols * D
    visited_flops = float(tile_flops[cls != SKIP].sum())
    all_flops = 4.0 * T_q * T_k * D
    i = np.arange(T_q)[:, None]
    useful = 4.0 * D * float(np.minimum(i + 1, T_k).sum())
    n = {name: int((cls == c).sum()) for name, c in (("full", FULL), ("diagonal", DIAGONAL), ("skipped", SKIP))}
    return {**n, "total": int(cls.size), "visited": n["full"] + n["diagonal"], "flops_noncausal": all_flops,
            "flops_visited": visited_flops, "useful_flops": useful,
            "flops_saved_fraction": 1.0 - visited_flops / all_flops}


def tile_map_figure(T: int = 256, block_q: int = 32, block_k: int = 32, D: int = 64):
    """The causal tile map: full (green), diagonal (orange, masked inside), skipped (grey) tiles."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    cls = tile_classes(T, block_q, block_k)
    summ = tile_summary(T, block_q, block_k, D)
    cmap = ListedColormap(["#e5e5e5", "#f0a35e", "#6aa870"])
    fig, ax = plt.subplots(figsize=(5.6, 5.6), constrained_layout=True)
    # draw in token coordinates, so ragged last tiles look shorter
    qe = np.minimum(np.arange(cls.shape[0] + 1) * block_q, T)
    ke = np.minimum(np.arange(cls.shape[1] + 1) * block_k, T)
    ax.pcolormesh(ke, qe, cls, cmap=cmap, vmin=0, vmax=2, edgecolors="white", linewidth=1.2 if cls.size < 400 else 0)
    ax.plot([0, T], [0, T], color="black", lw=1, ls="--")
    ax.set_xlim(0, T)
    ax.set_ylim(T, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("key index j")
    ax.set_ylabel("query index i")
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    ax.legend(handles=[Patch(color="#6aa870", label=f"full: {summ['full']}"),
                       Patch(color="#f0a35e", label=f"diagonal (masked): {summ['diagonal']}"),
                       Patch(color="#e5e5e5", label=f"skipped: {summ['skipped']}")],
              loc="lower left", fontsize=9, framealpha=0.95)
    ax.set_title(f"T={T}, block_q={block_q}, block_k={block_k}, D={D}: visits {summ['visited']} of {summ['total']} tiles\n"
                 f"FLOPs {summ['flops_visited']:.3g} of {summ['flops_noncausal']:.3g} non-causal: "
                 f"{summ['flops_saved_fraction']:.1%} saved (the ideal is {1 - summ['useful_flops'] / summ['flops_noncausal']:.1%})",
                 fontsize=9)
    return fig


def tile_map_widget(T: int = 256, block_q: int = 32, block_k: int = 32, D: int = 64):
    """The widget of :func:`causal_tile_map`, not displayed."""
    import ipywidgets as w

    blocks = [4, 7, 8, 11, 16, 32, 64, 128]
    return _live(tile_map_figure, {
        "T": w.IntSlider(value=T, min=8, max=1024, step=1, description="T", continuous_update=False),
        "block_q": w.Dropdown(options=sorted(set(blocks + [block_q])), value=block_q, description="block_q"),
        "block_k": w.Dropdown(options=sorted(set(blocks + [block_k])), value=block_k, description="block_k"),
        "D": w.Dropdown(options=sorted({32, 64, 128, D}), value=D, description="D"),
    }, "Block sizes need not divide T: the last tiles are shorter. With b_q ≠ b_k a query tile can "
       "meet two diagonal key tiles.")


def causal_tile_map(T: int = 256, block_q: int = 32, block_k: int = 32, D: int = 64,
                    interactive: bool | None = None) -> None:
    """The causal tile map with controls for T, the block sizes and D (a static figure without a frontend)."""
    _display_or_static(lambda: tile_map_widget(T, block_q, block_k, D), tile_map_figure,
                       dict(T=T, block_q=block_q, block_k=block_k, D=D), interactive)


# ------------------------------------------------------------------------------------ roofline
#: (peak dense TFLOP/s, memory bandwidth in TB/s) of a few devices; H200 as measured for the course.
DEVICES = {
    "H200 (bf16, measured)": (706.0, 4.27),
    "H100 SXM (bf16, datasheet)": (989.0, 3.35),
    "A100 80GB (bf16, datasheet)": (312.0, 2.0),
    "T4 (fp16, datasheet; Colab)": (65.0, 0.32),
}


def attention_traffic(T: int, D: int = 64, B: int = 1, H: int = 1, bytes_per_el: int = 2, causal: bool = False,
                      block_q: int = 128) -> dict:
    """HBM bytes and FLOPs of one attention forward, naive (three kernels) and fused (FlashAttention).

    naive: QKᵀ reads Q, K and writes S (T²); softmax reads S and writes P; PV reads P, V and writes
    O: 4·T² + 4·T·D elements per head. It computes every score even when causal (and masks after).

    fused: reads Q once, K and V once per query tile of ``block_q`` rows (about half as many tiles
    when causal), writes O and a float32 LSE: no T² term at all. That is the bound without any cache
    (``fused_bytes``); on a GPU most re-reads of K and V hit the L2 cache, and the ideal
    (``fused_ideal_bytes``) reads every input once.

    FLOPs: 4·T²·D per head (two matmuls); the fused causal kernel counts half (the skipped tiles).
    """
    heads = B * H
    n_q_tiles = math.ceil(T / block_q)
    kv_passes = (n_q_tiles + 1) / 2 if causal else n_q_tiles
    naive_bytes = heads * (4 * T * T + 4 * T * D) * bytes_per_el
    fused_bytes = heads * ((2 * T * D + 2 * T * D * kv_passes) * bytes_per_el + 4 * T)
    flops = 4.0 * heads * T * T * D
    fused_flops = flops / 2 if causal else flops
    ideal_bytes = heads * (4 * T * D * bytes_per_el + 4 * T)
    return {"naive_bytes": float(naive_bytes), "fused_bytes": float(fused_bytes),
            "fused_ideal_bytes": float(ideal_bytes), "naive_flops": flops, "fused_flops": fused_flops,
            "naive_intensity": flops / naive_bytes, "fused_intensity": fused_flops / fused_bytes,
            "fused_ideal_intensity": fused_flops / ideal_bytes,
            "score_matrix_bytes": float(heads * T * T * bytes_per_el)}


def _attainable(intensity: float, peak_tflops: float, bw_tbs: float) -> float:
    return min(peak_tflops, intensity * bw_tbs)


def roofline_figure(T: int = 4096, D: int = 64, B: int = 8, H: int = 16, bytes_per_el: int = 2, causal: bool = True,
                    block_q: int = 128, device: str = "H200 (bf16, measured)"):
    """The device's roofline with naive and fused attention placed on it, and their bytes and FLOPs."""
    import matplotlib.pyplot as plt

    peak, bw = DEVICES[device]
    t = attention_traffic(T, D, B, H, bytes_per_el, causal, block_q)
    fig, (ax, axt) = plt.subplots(1, 2, figsize=(10, 4.8), gridspec_kw={"width_ratios": [1.3, 1]},
                                  constrained_layout=True)
    ai = np.logspace(-1, 4, 200)
    ax.loglog(ai, np.minimum(peak, ai * bw), color="black", lw=1.5)
    ridge = peak / bw
    ax.axvline(ridge, color="#999999", ls=":", lw=1)
    ax.text(ridge * 1.1, peak * 0.03, f"ridge {ridge:.0f} FLOP/B", fontsize=8, color="#555555")
    rows = []
    for name, color, fl, by in (("naive", "#c44e52", t["naive_flops"], t["naive_bytes"]),
                                ("fused, no cache", "#8172b3", t["fused_flops"], t["fused_bytes"]),
                                ("fused, ideal", "#4c72b0", t["fused_flops"], t["fused_ideal_bytes"])):
        inten = fl / by
        att = _attainable(inten, peak, bw)
        ms = max(fl / (peak * 1e12), by / (bw * 1e12)) * 1e3
        ax.plot([inten], [att], "o", color=color, ms=9, label=f"{name}: {inten:.0f} FLOP/B")
        rows.append((name, by, fl, inten, att, ms))
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_ylim(peak * 1e-3, peak * 2)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title(f"{device}: {peak:g} TFLOP/s, {bw:g} TB/s", fontsize=9)
    axt.axis("off")
    lines = [f"B={B} H={H} T={T} D={D}, {bytes_per_el} B/element, {'causal' if causal else 'not causal'}",
             f"S for all heads: {t['score_matrix_bytes']:.3e} B ({t['score_matrix_bytes'] / 2**30:.3g} GiB)"]
    for name, by, fl, inten, att, ms in rows:
        bound = "memory-bound" if inten < ridge else "compute-bound"
        lines += [f"{name}", f"  HBM bytes  {by:.3e} ({by / 2**30:.3g} GiB)", f"  FLOPs      {fl:.3e}",
                  f"  intensity  {inten:.1f} FLOP/B, {bound}", f"  time       ≥ {ms:.3g} ms (≤ {att:.0f} TFLOP/s)"]
    lines += ["", "no cache: K, V re-read per query tile", f"of {block_q} rows; ideal: each input read once"]
    axt.text(0, 1, "\n".join(lines), va="top", family="monospace", fontsize=8.5)
    return fig


def roofline_widget(T: int = 4096, D: int = 64, B: int = 8, H: int = 16, causal: bool = True):
    """The widget of :func:`roofline_calculator`, not displayed."""
    import ipywidgets as w

    return _live(roofline_figure, {
        "T": w.Dropdown(options=sorted({512, 1024, 2048, 4096, 8192, 16384, T}), value=T, description="T"),
        "D": w.Dropdown(options=sorted({32, 64, 128, 256, 1024, D}), value=D, description="D"),
        "bytes_per_el": w.Dropdown(options=[("bf16/fp16", 2), ("fp32", 4)], value=2, description="dtype"),
        "causal": w.Checkbox(value=causal, description="causal"),
        "block_q": w.Dropdown(options=[16, 32, 64, 128, 256], value=128, description="block_q"),
        "device": w.Dropdown(options=list(DEVICES), value=next(iter(DEVICES)), description="device"),
    }, f"B={B}, H={H}. Check your predictions: bytes of S, FLOPs, and which side of the ridge each "
       "implementation lands on.", fixed={"B": B, "H": H})


def roofline_calculator(T: int = 4096, D: int = 64, B: int = 8, H: int = 16, causal: bool = True,
                        interactive: bool | None = None) -> None:
    """Bytes and FLOPs of naive against fused attention on a roofline, with controls for the sizes."""
    _display_or_static(lambda: roofline_widget(T, D, B, H, causal), roofline_figure,
                       dict(T=T, D=D, B=B, H=H, causal=causal), interactive)
