"""Tests written for Triton's CPU interpreter (CPU tensors, small cases), on any host.

On a machine without a GPU they always run. On a GPU host they need the interpreter for the whole
pytest process (``TRITON_INTERPRET=1 pytest tests/test_gpu_compile.py tests/test_launcher_strides.py
tests/test_tuning.py``): Triton fixes its mode for its own library when it is first imported, so a
module cannot switch one process between compiled and interpreted kernels without breaking the GPU
tests that run after it (seen on the H200, notes/gpu/2026-12-03/session9/README.md).
"""

from __future__ import annotations

import os

import pytest
import torch

#: True on a GPU host whose process was not started with ``TRITON_INTERPRET=1``.
COMPILED_GPU_PROCESS = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"

#: Mark for a module of interpreter tests (``pytestmark = interpreter_only``).
interpreter_only = pytest.mark.skipif(
    COMPILED_GPU_PROCESS, reason="interpreter tests: on a GPU host run them with TRITON_INTERPRET=1 "
                                 "(tests/interpreter.py)")
