"""The checking harness under the per-notebook checkers (:mod:`attnlab.verify` and its siblings).

Load accounting and work models, the method probe, poisoned and sparse buffers, the diagnoses of known
mistakes and the dispatcher integrity check. Part of the course layer: it imports the runtime and the
course's references, never the grader or the tools.
"""
