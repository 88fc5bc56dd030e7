"""The bottom layer: the device and Triton's interpreter, and the channel that sends a reason for review.

Imports nothing else of the package (tests/test_layers.py keeps it so).
"""
