"""Typical mistakes in notebook 06 (format: samples/README.md)."""

from attnlab.grading.samples import Mistake

NB, CELL = "06_scaling_sweep", "predictions"

MISTAKES = [
    Mistake("06-causal-flops-not-halved", NB, CELL,
            (("kernel_us_at_512 = 4 * 8 * 16 * 512**2 * 64 / 2 / 700e12 * 1e6",
              "kernel_us_at_512 = 4 * 8 * 16 * 512**2 * 64 / 700e12 * 1e6"),),
            ("test_predictions",), "counts the full square of FLOPs for causal attention"),
    Mistake("06-naive-time-in-seconds", NB, CELL,
            (("naive_min_ms_at_8192 = 4 * 8 * 16 * 8192**2 * 2 / 4.27e12 * 1e3",
              "naive_min_ms_at_8192 = 4 * 8 * 16 * 8192**2 * 2 / 4.27e12"),),
            ("test_predictions",), "answers in seconds where milliseconds were asked"),
]

TYPICAL = "06-causal-flops-not-halved"
