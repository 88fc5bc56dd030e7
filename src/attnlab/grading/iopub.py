"""The grader's iopub channel, with a cap on the size of one message from a kernel.

A kernel's output reaches the grader as iopub messages, and ZeroMQ hands over whole messages only:
a cell that printed 256 MiB at once made the grading process receive, decode and hold all of it
before :class:`attnlab.grading.execute.GradingExecute` kept its first 100,000 characters (three
such prints: 1.1 GiB peak in the grader, red team 2026-12-02; with ``--jobs 16`` tens of GiB). A cap
inside the kernel's process (a patched ``sys.stdout``) is learner code's to undo, so the cap sits on
the grader's socket: ZeroMQ's ``MAXMSGSIZE``, which refuses a message past the cap from its header,
before any of it is read into memory.

libzmq answers such a message by closing the connection for good (a protocol error: no reconnect),
and every later message of the kernel would be lost. :class:`CappedIOPubChannel` watches its socket
(a ZeroMQ socket monitor) and, when a connection ends, replaces the socket with a new one connected
to the same kernel; it counts each replacement in :attr:`CappedIOPubChannel.dropped`, which the
grader reads after each cell to add its "output truncated" note. Messages the kernel sends in the
moment between are lost as well (an idle status among them: nbclient then waits its
``iopub_timeout`` and goes on).
"""

from __future__ import annotations

import os
from time import monotonic

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from queue import Empty
from traitlets import Type

__all__ = ["MAX_MESSAGE_ENV", "max_message_bytes", "CappedIOPubChannel", "CappedKernelClient"]

#: The environment variable that sets the cap, in MiB (default 16: a notebook's largest honest message,
#: a figure, is a few hundred kB; GradingExecute keeps 100,000 characters of text per cell anyway).
MAX_MESSAGE_ENV = "ATTNLAB_MAX_MESSAGE_MB"
#: How often a channel waiting for a message looks at its socket monitor (seconds).
_WATCH = 0.25


def max_message_bytes() -> int:
    """The largest iopub message the grader receives, in bytes (:data:`MAX_MESSAGE_ENV`, default 16 MiB)."""
    try:
        mib = float(os.environ.get(MAX_MESSAGE_ENV, "16"))
    except ValueError:
        mib = 16.0
    return max(1, int(mib * 2**20))


class CappedIOPubChannel(AsyncZMQSocketChannel):
    """An iopub channel whose socket refuses messages over :func:`max_message_bytes`, and that connects
    again when libzmq has closed the connection over one. ``reconnect``: makes a new connected socket."""

    def __init__(self, socket: zmq.asyncio.Socket, session, loop=None, reconnect=None) -> None:
        super().__init__(socket, session, loop)
        self._reconnect = reconnect
        self.dropped = 0  # connections ended (each a message over the cap, or the kernel gone)
        self._monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    async def _watch(self) -> None:
        if self._reconnect is None or not await self._monitor.poll(0):
            return
        while await self._monitor.poll(0):  # the events themselves say nothing more
            await self._monitor.recv_multipart()
        old, monitor = self.socket, self._monitor
        self.socket = self._reconnect()
        self._monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.dropped += 1
        old.disable_monitor()
        monitor.close(linger=0)
        old.close(linger=0)

    async def get_msg(self, timeout: float | None = None):  # type: ignore[override]
        """The next message (as the parent's), waiting at most ``timeout`` seconds; :class:`queue.Empty`
        when none came. Meanwhile a closed connection is replaced (:meth:`_watch`)."""
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            await self._watch()
            wait = _WATCH if deadline is None else max(0.0, min(_WATCH, deadline - monotonic()))
            if await self.socket.poll(int(wait * 1000)):
                return await self._recv()
            if deadline is not None and monotonic() >= deadline:
                raise Empty

    async def msg_ready(self) -> bool:  # type: ignore[override]
        await self._watch()
        return await super().msg_ready()

    def close(self) -> None:
        if self._monitor is not None:
            try:
                self.socket.disable_monitor()
            except zmq.ZMQError:
                pass
            self._monitor.close(linger=0)
            self._monitor = None
        super().close()


class CappedKernelClient(AsyncKernelClient):
    """jupyter_client's asynchronous client with :class:`CappedIOPubChannel` as its iopub channel."""

    iopub_channel_class = Type(CappedIOPubChannel)

    def connect_iopub(self, identity: bytes | None = None) -> zmq.sugar.socket.Socket:
        socket = self.context.socket(zmq.SUB)
        socket.linger = 1000
        socket.setsockopt(zmq.MAXMSGSIZE, max_message_bytes())  # before connect: it holds for that connection
        if identity:
            socket.identity = identity
        socket.connect(self._make_url("iopub"))
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        return socket

    @property
    def iopub_channel(self):
        if self._iopub_channel is None:
            self._iopub_channel = self.iopub_channel_class(self.connect_iopub(), self.session, self.ioloop,
                                                           reconnect=self.connect_iopub)
        return self._iopub_channel
