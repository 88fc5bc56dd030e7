"""Execute course notebooks top to bottom with nbclient and report every cell that raised.

    python benchmarks/execute_notebooks.py OUT_DIR NOTEBOOK.ipynb [...]

Each notebook runs in OUT_DIR (a copy of its folder, so notebook 06 finds notebook 05 beside it);
the executed copies stay there. Exit status 1 if any cell raised. Used for the GPU runs recorded in
notes/ (the CPU path is covered by the test suite's autograding).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in argv[1:]]
    for p in paths:
        shutil.copy(p, out / p.name)
    failed = False
    for p in paths:
        nb = nbformat.read(out / p.name, as_version=4)
        start = time.perf_counter()
        client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(out)}})
        client.execute()
        nbformat.write(nb, out / p.name)
        errors = [(c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")), o.ename, o.evalue.splitlines()[0][:200]
                   if o.evalue else "") for c in nb.cells if c.cell_type == "code"
                  for o in c.outputs if o.output_type == "error"]
        graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
        print(f"{p.name}: {time.perf_counter() - start:6.1f} s, {len(graded)} test cells, "
              f"{'OK' if not errors else f'{len(errors)} cells raised'}", flush=True)
        for e in errors:
            print("   ", *e)
        failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
