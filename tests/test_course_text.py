"""The course text against the committed GPU figures (issue 11, items 10 to 15).

Model answers quote measurements; these tests read the raw output committed in notes/gpu/ and
require the figures the answers quote to be the ones measured, the cells to measure what the text
says they measure, and no question to be asked twice across notebooks 02, 05 and 06.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import torch

from attnlab import bench, sweep
from attnlab.widgets import DEVICES, attention_traffic

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "notes" / "gpu" / "2026-11-30"
LOG = (RUN / "notebook_cells.log").read_text()
_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: nbgrader=(?P<meta>\{.*\}))?\s*$")


def cells(name: str) -> list[tuple[str | None, str, str]]:
    """(grade_id, "markdown" or "code", text) of every cell of notebooks/<name>.py; markdown
    without its leading '# '."""
    out = []
    for line in (ROOT / "notebooks" / f"{name}.py").read_text().splitlines():
        m = _HEADER.match(line)
        if m:
            meta = json.loads(m.group("meta")) if m.group("meta") else {}
            out.append([meta.get("grade_id"), "markdown" if m.group("md") else "code", []])
        elif out:
            out[-1][2].append(re.sub(r"^# ?", "", line) if out[-1][1] == "markdown" else line)
    return [(gid, kind, " ".join("\n".join(text).split())) for gid, kind, text in out]


def cell(name: str, grade_id: str) -> str:
    (text,) = [t for gid, _, t in cells(name) if gid == grade_id]
    return text


def markdown(name: str) -> str:
    return " ".join(t for _, kind, t in cells(name) if kind == "markdown")


def log_section(title: str) -> str:
    start = LOG.index(f"=== {title}")
    end = LOG.find("\n=== ", start + 1)
    return LOG[start:end if end > 0 else None]


# ------------------------------------------------------------------------------------- item 10
def softmax_rows() -> dict[tuple[int, int], tuple[int, int]]:
    """(n_cols, MiB moved) -> (yours % of copy, torch % of copy), from notebook 04's printed table."""
    rows = {}
    for line in log_section("notebook 04").splitlines():
        f = line.replace(",", "").split()
        if len(f) == 9 and f[0].isdigit():
            rows[(int(f[1]), int(f[2]))] = (int(f[5].rstrip("%")), int(f[8].rstrip("%")))
    return rows


def test_softmax_bench_moves_enough_bytes_per_run():
    bench_cell = cell("04_triton_softmax", "bench-softmax")
    assert "bench.rows_for_bytes(" in bench_cell
    for n_cols in (256, 1024, 4096, 16384):
        moved = 2 * bench.rows_for_bytes(n_cols, 4) * n_cols * 4
        assert 256 << 20 <= moved <= 1 << 30
    assert bench.rows_for_bytes(10**9, 4) == 1
    rows = softmax_rows()
    assert {(1024, 1024), (16384, 1024), (1024, 32)} <= set(rows), rows


def test_bandwidth_answer_quotes_what_the_bench_measured():
    answer = cell("04_triton_softmax", "answer-predict-bandwidth")
    rows = softmax_rows()
    for key in ((1024, 1024), (16384, 1024), (1024, 32)):
        for pct in rows[key]:
            assert f"{pct} %" in answer, (key, pct)
    # the launch-bound small run is far from copy bandwidth, and the answer says so
    assert max(rows[(1024, 32)]) < 0.7 * 100 and "launch-bound" in answer
    assert "close to the\ncopy bandwidth (80 to 95 %)" not in answer


# ------------------------------------------------------------------------------------- item 11
def overhead_rows() -> dict[tuple[int, str], tuple[float, float, float]]:
    rows = {}
    for line in log_section("notebook 06").splitlines():
        m = re.match(r"\s*(\d+) (your kernel alone|your launcher|SDPA)\D.*?([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line)
        if m:
            rows[(int(m.group(1)), m.group(2))] = tuple(float(m.group(i)) for i in (3, 4, 5))
    return rows


def test_sweep_times_the_kernel_alone_and_measures_host_overhead_apart():
    code = " ".join(t for _, kind, t in cells("06_scaling_sweep") if kind == "code")
    assert '"yours": sweep.kernel_only(flash_kernel)' in code
    assert "return sweep.kernel_only(flash_kernel, **config)" in code  # tuning too
    assert "bench.per_call_us(" in code
    rows = overhead_rows()
    assert len(rows) == 6, rows
    # the host-bound regime the answer describes: through the launcher at T=512, wall time = host time
    gpu, host, wall = rows[(512, "your launcher")]
    assert host > gpu and abs(wall - host) < 0.1 * host


def test_small_T_answer_is_written_from_the_data():
    answer = cell("06_scaling_sweep", "answer-predict-small-T")
    rows = overhead_rows()
    for key, index in (((512, "your kernel alone"), 0), ((512, "your kernel alone"), 1), ((512, "your launcher"), 1)):
        assert f"{rows[key][index]:.0f} µs" in answer, (key, index)
    assert "a few kernel launches" not in answer and "becomes compute-bound" not in answer
    points = {(p.impl, p.T): p for p in sweep.read_csv(RUN / "sweep_results.csv")}
    assert f"{points['naive', 512].ms * 1e3:.0f} µs" in answer
    assert f"{points['yours', 512].tflops:.0f} to {points['yours', 16384].tflops:.0f} TFLOP/s" in answer
    assert points["naive", 16384].status == "oom" and "out of memory" in answer


_KERNEL_ONLY_SCRIPT = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
import torch
from attnlab import sweep
from attnlab.nbload import load_notebook_module
from attnlab.reference import naive_attention
nb05 = load_notebook_module(sys.argv[1], cells=("setup", "_flash_fwd_kernel", "triton_flash_attention"))
fn = sweep.kernel_only(nb05._flash_fwd_kernel, block_m=16, block_n=16)
q, k, v = (torch.randn(1, 2, 20, 16) for _ in range(3))
o1 = fn(q, k, v, True)
torch.testing.assert_close(o1, naive_attention(q, k, v, causal=True)[0], rtol=1e-5, atol=1e-5)
o2 = fn(q, k, v, True)
assert o2.data_ptr() == o1.data_ptr(), "outputs must be allocated once per shape"
o3 = fn(q[:, :, :17].contiguous(), k[:, :, :17].contiguous(), v[:, :, :17].contiguous(), False)
torch.testing.assert_close(o3, naive_attention(q[:, :, :17], k[:, :, :17], v[:, :, :17])[0], rtol=1e-5, atol=1e-5)
print("kernel_only ok")
"""


def test_kernel_only_reuses_its_outputs_and_matches_the_reference():
    import subprocess
    import sys

    nb05 = ROOT / "source" / "attention_kernels" / "05_triton_flash.ipynb"
    p = subprocess.run([sys.executable, "-c", _KERNEL_ONLY_SCRIPT, str(nb05)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0 and "kernel_only ok" in p.stdout, p.stdout + p.stderr


def test_per_call_us_counts_host_time():
    import time

    per = bench.per_call_us(lambda: time.sleep(0.002), n_calls=3, repeats=2)
    assert 2000 <= per.host_us <= per.wall_us


# ------------------------------------------------------------------------------------- item 12
def test_both_causal_alignments_are_taught():
    text = markdown("02_flash_forward")
    assert "top-left" in text and "bottom-right" in text
    assert r"j \le i + T_k - T_q" in text and "is_causal" in text and "notebook 08" in text
    assert "this course's `causal=True`" in text  # says which one the course uses
    assert "bottom-right" in markdown("03_flash_backward")


# ------------------------------------------------------------------------------------- item 13
def test_citations_credit_flashattention_2_for_the_loop_and_the_lse():
    from attnlab.reference import naive_attention

    src = (ROOT / "notebooks" / "02_flash_forward.py").read_text()
    assert "(Dao et al. 2022, Algorithm 1), one query tile" not in src
    assert '"""FlashAttention-2 forward (Dao 2023, Algorithm 1)' in src
    box = markdown("02_flash_forward")
    for row in ("loop order", "normalising", "saved for the backward", "parallelism"):
        assert f"| {row} |" in box, row
    doc = " ".join(naive_attention.__doc__.split())
    assert "the LSE is what FlashAttention-2 saves" in doc and "FlashAttention-1 saved the running max m and sum l" in doc


# ------------------------------------------------------------------------------------- item 14
def test_why_faster_answer_quotes_the_roofline_calculator():
    peak, bw = DEVICES["H200 (bf16, measured)"]
    t = attention_traffic(4096, 64, 8, 16, 2, True)  # the calculator's defaults in 02
    answer = cell("02_flash_forward", "answer-why-faster")
    assert f"${t['naive_bytes'] / 1e10:.2f} \\cdot 10^{{10}}$ bytes" in answer
    assert f"{t['naive_intensity']:.0f} FLOP/B" in answer and f"{t['fused_intensity']:.0f} FLOP/B" in answer
    assert f"about {peak / bw:.0f} FLOP/B" in answer
    assert f"\\approx {t['naive_bytes'] / (bw * 1e12) * 1e3:.1f}$ ms" in answer
    assert f"{t['fused_bytes'] / (bw * 1e12) * 1e3:.2f} ms" in answer
    assert f"{t['fused_flops'] / (peak * 1e12) * 1e3:.2f} ms" in answer


def test_tuning_answer_names_the_measured_winner():
    with open(RUN / "tuning_results.csv") as f:
        table = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    answer = cell("06_scaling_sweep", "answer-tuning")
    best, fifth = float(table[0]["tflops"]), float(table[4]["tflops"])
    cfg = dict(kv.split("=") for kv in table[0]["config"].split())
    assert (f"block_m={cfg['block_m']}, block_n={cfg['block_n']}, {cfg['num_warps']} warps,\n"
            f"{cfg['num_stages']} stages").replace("\n", " ") in answer
    assert f"at {best:.0f} TFLOP/s" in answer and f"within {round((best / fifth - 1) * 100)} %" in answer
    default = next(float(r["tflops"]) for r in table
                   if r["config"] == "block_m=64 block_n=64 num_warps=4 num_stages=2")
    assert f"{round((best / default - 1) * 100)} % over the default's {default:.0f}" in answer
    assert "usually wins" not in answer


def test_traffic_count_has_its_constants_units_and_causal_halving():
    text = markdown("02_flash_forward")
    assert "exactly when $d^2 < M$" not in text and "the FLOPs are unchanged" not in text
    assert r"8 T^2 d^2 / M" in text and "$d^2 < M / 2$" in text and "in elements, not bytes" in text
    assert "$2T^2d$" in text and "$4T^2d$" in text


def test_compute_bound_claim_agrees_with_the_roofline_widget():
    # the no-cache bound at the sweep's default tiles, as the widget computes it
    peak, bw = DEVICES["H200 (bf16, measured)"]
    t = attention_traffic(8192, 64, 8, 16, 2, True, block_q=64)
    cap = min(peak, t["fused_intensity"] * bw)
    answer = cell("06_scaling_sweep", "answer-predict-small-T")
    assert f"near {round(cap, -1):.0f} TFLOP/s" in answer
    measured = next(p.tflops for p in sweep.read_csv(RUN / "sweep_results.csv") if (p.impl, p.T) == ("yours", 8192))
    assert measured > cap and f"measured {round(measured, -1):.0f}" in answer


# ------------------------------------------------------------------------------------- item 15
def test_no_question_is_asked_twice_across_02_05_06():
    answers = {nb: {gid for gid, _, _ in cells(nb) if gid and gid.startswith("answer-")}
               for nb in ("02_flash_forward", "05_triton_flash", "06_scaling_sweep")}
    seen: dict[str, str] = {}
    for nb, gids in answers.items():
        for gid in gids:
            assert gid not in seen, f"{gid} in {seen.get(gid)} and {nb}"
            seen[gid] = nb

    def predicted(nb, gid):
        return set(re.findall(r"^(\w+) = None", (ROOT / "notebooks" / f"{nb}.py").read_text().split(
            f'"grade_id": "{gid}"')[1].split("# %%")[0], re.M))

    assert not predicted("05_triton_flash", "predict-attention-cost") & predicted("06_scaling_sweep", "predictions")
    assert "d = 1024" not in markdown("05_triton_flash") and "d = 1024" in markdown("02_flash_forward")
    for nb in answers:
        assert "2 to 4 times" not in markdown(nb), nb


def test_05_answers_quote_its_bench():
    section = log_section("notebook 05")
    rates = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(yours .*?|SDPA .*?):.*?([\d.]+) TFLOP/s", section, re.M)}
    yours = [r for label, r in rates.items() if label.startswith("yours")]
    answer = cell("05_triton_flash", "answer-same-algorithm")
    assert f"mine {max(yours):.0f} TFLOP/s at best" in answer
    assert f"cuDNN {rates['SDPA default (cuDNN)']:.0f}" in answer
    assert f"backend {rates['SDPA FlashAttention-2 backend']:.0f}" in answer
    diff = re.search(r"max \|yours - SDPA\| in bf16: ([\d.]+)", section).group(1)
    assert diff in cell("05_triton_flash", "answer-bf16-difference") or diff in markdown("05_triton_flash")


def test_05_cpu_table_quotes_its_bench():
    """Without a GPU, 05's bench cell prints the H200 figures Q1 is answered from: the measured ones."""
    section = log_section("notebook 05")
    yours = [float(r) for r in re.findall(r"^yours .*?([\d.]+) TFLOP/s", section, re.M)]
    sdpa = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(SDPA .*?):.*?([\d.]+) TFLOP/s", section, re.M)}
    src = cell("05_triton_flash", "bench-flash")
    recorded = re.search(r"zip\(CONFIGS, \(([\d, ]+)\)\)", src).group(1)
    assert [int(r) for r in recorded.split(",")] == [round(r) for r in yours]
    for label, rate in sdpa.items():
        assert f'("{label}", {rate:.0f})' in src, label


# ------------------------------------------------------------------------ notebook 08 (issue 13)
def test_decode_table_and_answer_quote_the_h200_runs():
    """Notebook 08's table (split-K launched from Python and from a CUDA graph, SDPA, the 05 kernel) and
    its model answer quote the H200 run exactly as rounded there (notes/gpu/2026-12-04/session12/run2/)."""
    from attnlab import bench_decode

    final = ROOT / "notes/gpu/2026-12-04/session12/run2"
    copy_gbs = float(re.search(r"x copy \((\d+) GB/s\)", (final / "decode_final.txt").read_text()).group(1))
    by = {(p.impl, p.H_kv, p.T_k): p for p in bench_decode.read_csv(final / "decode_final.csv") if p.B == 1}
    f5_by = {(H_kv, T_k): p for (impl, H_kv, T_k), p in by.items() if impl == "05 kernel, T_q=1"}
    text = markdown("08_flash_decoding")
    assert f"copy bandwidth {copy_gbs:.0f} GB/s" in " ".join(text.split())
    rows = 0
    for H_kv, T_k, label in ((8, 32768, "32k"), (8, 131072, "128k"), (32, 32768, "32k"), (32, 131072, "128k")):
        sk, sd, f5 = by[("split-K", H_kv, T_k)], by[("SDPA, T_q=1", H_kv, T_k)], f5_by[(H_kv, T_k)]
        row = (f"| 1 | {H_kv} | {label} | {sk.ms * 1e3:.1f} µs, {sk.gbs:.0f} GB/s | {sk.graph_ms * 1e3:.1f} µs, "
               f"{sk.graph_gbs:.0f} GB/s | {sk.graph_gbs / copy_gbs:.2f} | {sd.graph_ms * 1e3:.1f} µs, "
               f"{sd.graph_gbs:.0f} GB/s | {f5.graph_gbs:.0f} GB/s |")
        assert row in text, row
        rows += 1
    assert rows == 4
    answer = cell("08_flash_decoding", "answer-measured")
    sk32, sk8 = by[("split-K", 32, 32768)], by[("split-K", 8, 32768)]
    f32, f8 = f5_by[(32, 32768)], f5_by[(8, 32768)]
    for quoted in (f"{sk32.graph_gbs / copy_gbs:.2f} of the copy", f"{sk32.graph_gbs:.0f} GB/s",
                   f"{sk32.graph_ms * 1e3:.1f} µs", f"{sk8.graph_gbs / copy_gbs:.2f} with GQA",
                   f"{sk8.graph_ms * 1e3:.1f} µs", f"take {sk32.ms * 1e3:.0f} and {sk8.ms * 1e3:.0f} µs",
                   f"{sk32.graph_gbs / f32.graph_gbs:.1f}× faster", f"{sk8.graph_gbs / f8.graph_gbs:.1f}× with GQA"):
        assert quoted in answer, quoted


# ------------------------------------------------------------------- the README and docs/ pages
_LINK = re.compile(r"\]\(([^()\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(text: str) -> str:
    """The text outside fenced code blocks, where a link is a link."""
    return "".join(part for i, part in enumerate(re.split(r"^```.*$", text, flags=re.M)) if i % 2 == 0)


@pytest.mark.parametrize("page", ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                                                       for p in (ROOT / "docs").glob("*.md"))])
def test_relative_links_in_readme_and_docs_resolve(page):
    """Every relative link (and image) of the README and of docs/*.md names a file of the repository,
    and an anchor names a heading of that file: moving text between pages must not leave a dead link."""
    path = ROOT / page
    dead = []
    for target in _LINK.findall(_prose(path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            dead.append(target)
        elif anchor and resolved.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", _prose(resolved.read_text()), flags=re.M)
            if anchor not in {_slug(h) for h in headings}:
                dead.append(target)
    assert not dead, f"{page}: links to nothing: {dead}"


def test_readme_stays_a_few_screens():
    """Issue 32 item 5: the README is for newcomers (what the course is, the two commands, how to start);
    everything else lives in docs/ pages that it links."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "move the details into a docs/ page and link it"
    for command in ("make grade", "make test", "make test-deploy"):
        assert command in readme
    linked = {m.partition("#")[0] for m in _LINK.findall(readme) if m.startswith("docs/")}
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")} <= linked
