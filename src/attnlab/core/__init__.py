"""The bottom layer, the runtime (not named so: ``attnlab.runtime`` is the device function the package
exports): the device and Triton's interpreter, and the channel that sends a reason for review.

Imports nothing else of the package but :mod:`attnlab.kernel_source` (tests/test_layers.py keeps it so).
"""
