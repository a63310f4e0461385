"""``POST api/gpu/kernels/<id>/free-cache``: ask a kernel of this server to return PyTorch's cached
GPU memory to the driver.

The server opens a comm to the kernel's ``jupyter_gpu.free_cache`` target (registered by
``%load_ext jupyter_gpu``) through a kernel client of its own, on the kernel's ZeroMQ channels,
and waits for the one reply. All of it is asynchronous: the event loop never waits on the kernel.
"""

from __future__ import annotations

import asyncio
import uuid
from queue import Empty
from typing import TYPE_CHECKING, Any, cast

from .schema import VERSION

if TYPE_CHECKING:
    from .schema.replies import FreeCacheReply

TARGET = "jupyter_gpu.free_cache"  # the kernel side's name: jupyter_gpu/kernel/free_cache.py
TIMEOUT = 10.0


class ActionRefused(Exception):
    """The action cannot be done; the message says why, for people (HTTP 409)."""


async def free_cache(kernel: Any, kernel_id: str, timeout: float = TIMEOUT) -> FreeCacheReply:
    """The kernel's answer to a comm opened to its free-cache target; ``ActionRefused`` when
    it has no such target or does not answer within ``timeout`` seconds."""
    # A session id of its own: a client made with the manager's session has the zmq identity of
    # every other such client in this server (a notebook's server-side execution, or a second
    # click), and the kernel's shell socket cannot tell them apart; one of them stops hearing back.
    session = kernel.session.clone()
    session.session = uuid.uuid4().hex
    client = kernel.client(session=session)
    client.start_channels()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        # Until the kernel answers on IOPub, its reply to the comm could be lost (ZeroMQ drops
        # messages to a subscriber that has not finished connecting).
        await client.wait_for_ready(timeout=timeout)
        comm_id = uuid.uuid4().hex
        msg = client.session.msg("comm_open", {"comm_id": comm_id, "target_name": TARGET, "data": {}})
        client.shell_channel.send(msg)
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise Empty
            reply = await client.get_iopub_msg(timeout=left)
            content = reply.get("content") or {}
            if content.get("comm_id") != comm_id:
                continue
            if reply["msg_type"] == "comm_msg":
                # the rest of the reply as the kernel's target (kernel/free_cache.py) sent it
                return cast(
                    "FreeCacheReply", {"version": VERSION, "kernel_id": kernel_id, **content.get("data", {})}
                )
            if reply["msg_type"] == "comm_close":  # ipykernel closes a comm to an unknown target
                raise ActionRefused(
                    "jupyter_gpu is not loaded in this kernel, so it cannot free its cache: run "
                    "`%load_ext jupyter_gpu` in the notebook (or restart the kernel to free everything)."
                )
    except (Empty, RuntimeError):  # wait_for_ready: RuntimeError (no answer, or died); get_msg: Empty
        raise ActionRefused(
            f"The kernel did not answer within {timeout:g} s; try again when it is idle."
        ) from None
    finally:
        client.stop_channels()
