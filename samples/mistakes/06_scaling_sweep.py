"""Typical mistakes in notebook 06 (format: samples/README.md)."""

from attnlab.grading.samples import Mistake

NB, CELL = "06_scaling_sweep", "predictions"

MISTAKES = [
    Mistake("06-causal-flops-not-halved", NB, CELL,
            (("causal_forward_flops = 4 * 8 * 16 * 2048**2 * 64 / 2", "causal_forward_flops = 4 * 8 * 16 * 2048**2 * 64"),),
            ("test_predictions",), "counts the full square of FLOPs for causal attention"),
    Mistake("06-score-bytes-in-gib", NB, CELL,
            (("score_matrix_bytes = 8 * 16 * 2048**2 * 2", "score_matrix_bytes = 1.0"),),
            ("test_predictions",), "answers in GiB where bytes were asked"),
]

TYPICAL = "06-causal-flops-not-halved"
