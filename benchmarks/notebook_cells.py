"""Run chosen code cells of the course's jupytext sources (notebooks/*.py) on a machine without Jupyter.

    python benchmarks/notebook_cells.py OUT_DIR

Prints what notebook 04's bench cell, notebook 06's sweep, host-overhead and tuning cells, and
notebook 05's bench cell print with the reference solutions, as a learner would see them on this
GPU. Needs torch, triton, matplotlib and tqdm only (no nbformat, nbclient or nbgrader): cells are
cut from the percent-format sources by their ``# %%`` headers and imported as modules (Triton reads
kernel source from a real file). Notebook 06's ``load-yours`` cell is replaced by the same three
names taken from notebook 05's kernel cells, since ``load_notebook_module`` needs a built .ipynb.
CSV files and the plot are written to OUT_DIR (the working directory of the cells).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: nbgrader=(?P<meta>\{.*\}))?\s*$")


def code_cells(name: str) -> list[tuple[str | None, bool, str]]:
    """(grade_id or None, is a test cell, source) for every code cell of notebooks/<name>.py."""
    cells, current = [], None
    for line in (ROOT / "notebooks" / f"{name}.py").read_text().splitlines():
        m = _HEADER.match(line)
        if m:
            current = None
            if not m.group("md"):
                meta = json.loads(m.group("meta")) if m.group("meta") else {}
                current = [meta.get("grade_id"), bool(meta.get("grade")) and not meta.get("solution"), []]
                cells.append(current)
        elif current is not None:
            current[2].append(line)
    return [(gid, test, "\n".join(src)) for gid, test, src in cells]


def run_module(label: str, sources: list[str], folder: Path, inject: dict | None = None):
    """Import ``sources`` as one module (after ``inject`` is placed in its namespace)."""
    path = folder / f"nbcells_{label}.py"
    path.write_text("\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(inject or {})
    start = time.perf_counter()
    spec.loader.exec_module(module)
    print(f"[{label}: {time.perf_counter() - start:.1f} s]", flush=True)
    return module


def pick(name: str, ids: tuple[str, ...]) -> list[str]:
    found = {gid: src for gid, _, src in code_cells(name) if gid in ids}
    missing = [i for i in ids if i not in found]
    if missing:
        raise SystemExit(f"{name}: no cells {missing}")
    return [found[i] for i in ids]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    mods = Path(tempfile.mkdtemp(prefix="nbcells-"))  # the cells as modules, outside OUT_DIR
    sys.path.insert(0, str(ROOT / "src"))

    print("=== notebook 04: bench-softmax", flush=True)
    run_module("nb04", pick("04_triton_softmax", ("setup", "_softmax_kernel", "triton_softmax", "bench-softmax")), mods)

    print("\n=== notebook 06: every code cell but the tests (load-yours from notebook 05's kernel cells)", flush=True)
    nb05 = run_module("nb05", pick("05_triton_flash", ("setup", "_flash_fwd_kernel", "triton_flash_attention")), mods)
    fwd = nb05.triton_flash_attention
    names = {"load_yours": lambda: ((lambda q, k, v, causal, **c: fwd(q, k, v, causal=causal, **c)[0]),
                                    fwd, nb05._flash_fwd_kernel)}
    nb06 = ["yours, triton_flash_attention, flash_kernel = load_yours()\nprint('your kernel: loaded')"
            if gid == "load-yours" else src for gid, test, src in code_cells("06_scaling_sweep") if not test]
    run_module("nb06", nb06, mods, inject=names)

    print("\n=== notebook 05: bench-flash", flush=True)
    run_module("nb05_bench", pick("05_triton_flash", ("setup", "_flash_fwd_kernel", "triton_flash_attention",
                                                      "bench-flash")), mods)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
