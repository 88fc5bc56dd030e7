"""Run code in one sandboxed kernel, started as the grader starts it (tests/test_forkserver.py,
tests/test_tasks.py and the device checks in notes/gpu/2026-12-02/forkserver/ use it; no pytest needed)."""

from __future__ import annotations

import os

from attnlab.grading import sandbox
from attnlab.grading.host.parallel import THREAD_VARS


def kernel_env(**extra: str) -> dict:
    """The grader's environment as a kernel gets it (one thread per pool), with a gradebook URL that
    must not reach the kernel."""
    return {**os.environ, **{var: "1" for var in THREAD_VARS}, "ATTNLAB_DB_URL": "postgresql://u:hunter2@db/g",
            **extra}


async def in_kernel(code: str, fork_server: bool = True, after=None, wait: bool = True, timeout: float = 60,
                    **manager):
    """Run ``code`` in a new sandboxed kernel (``manager``: more arguments of its kernel manager), waiting
    up to ``timeout`` seconds for each message until it ends, unless ``wait`` is False; (stdout and
    tracebacks, whether it was forked, what ``await after(km)`` says before the kernel is shut down)."""
    km = sandbox.SandboxedKernelManager(kernel_name="python3", fork_server=fork_server, **manager)
    await km.start_kernel(env=kernel_env())
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=timeout)
        msg_id = kc.execute(code)
        out = ""
        while wait:
            msg = await kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out += msg["content"]["text"]
            elif msg["msg_type"] == "error":
                out += "\n".join(msg["content"]["traceback"])
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        extra = await after(km) if after else None
        return out, km.forked, extra
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        km.remove_folders()
