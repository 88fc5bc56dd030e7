"""Support package of the Attention Kernels Lab.

What the notebooks and their hidden tests import: the reference attention, the device set-up,
the checks that test cells call, the given Triton launchers, benchmarking and plotting helpers,
and the grading command line. It holds no solutions and no hidden test cases.
"""

__version__ = "0.1.0"

from .core.device import Runtime, init, runtime  # noqa: F401  (cheap: imports nothing heavy)
