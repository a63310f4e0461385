"""Running cells in real kernels, as a front end does: an execute request, the cell's iopub
messages until the kernel is idle again, and its reply, kept as one ``Cell``. The one way the
tests run code in a kernel: ``run`` through a blocking client (``RealKernel`` is a kernel of its
own for that), and ``CellRunner``, ``execute`` and ``run_cell`` in a kernel of the test
jupyter_server, from its event loop (with JupyterLab's ``cellId`` when given).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.manager import AsyncKernelManager, KernelManager

from jupyter_gpu.analysis.stats_file import file_name
from support.paths import ROOT

# Seconds to wait for each message: a cell's first CUDA call on a loaded machine takes a while.
TIMEOUT = 120
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Cell:
    """What one execute request produced: the reply's content and the cell's iopub messages,
    in the order they came."""

    def __init__(self, reply: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        self.reply = reply
        self.messages = messages

    @property
    def status(self) -> str:
        """The reply's: 'ok', 'error' or 'aborted'."""
        return self.reply["status"]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def number(self) -> int:
        """The execution count the notebook shows beside the cell."""
        return next(
            m["content"]["execution_count"] for m in self.messages if m["msg_type"] == "execute_input"
        )

    def stream(self, name: str = "stdout") -> str:
        return "".join(
            m["content"]["text"]
            for m in self.messages
            if m["msg_type"] == "stream" and m["content"]["name"] == name
        )

    @property
    def traceback(self) -> str:
        """The traceback the notebook shows (without colours), or '' if the cell raised nothing."""
        return "".join(_text(m) for m in self.messages if m["msg_type"] == "error")

    @property
    def shown(self) -> str:
        """Text of everything displayed, in order: streams, rich outputs' text/plain, tracebacks."""
        return "".join(_text(m) for m in self.messages)


def _text(msg: dict[str, Any]) -> str:
    """What a notebook shows of one iopub message as text ('' for messages it does not show)."""
    content = msg["content"]
    if msg["msg_type"] == "stream":
        return content["text"]
    if msg["msg_type"] in ("display_data", "execute_result"):
        return content["data"].get("text/plain", "")
    if msg["msg_type"] == "error":
        return _ANSI.sub("", "\n".join(content["traceback"]))
    return ""


def run(client: BlockingKernelClient, code: str, timeout: float = TIMEOUT) -> Cell:
    """Run ``code`` as a cell through a blocking client (a kernel of the test's own)."""
    messages: list[dict[str, Any]] = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=messages.append)
    return Cell(reply["content"], messages)


class RealKernel:
    """An ipykernel of its own, whose connection file (and so the agent's stats file) lives in
    ``runtime``; driven synchronously, for tests with no server. ``extra_env``: more of the
    kernel's environment (e.g. ``JPY_SESSION_NAME``, as jupyter_server sets it)."""

    def __init__(self, runtime: Path, **extra_env: str) -> None:
        self.kernel_id = str(uuid.uuid4())
        self.runtime = runtime
        self.km = KernelManager(connection_file=str(runtime / f"kernel-{self.kernel_id}.json"))
        env = dict(
            os.environ,
            **extra_env,
            JUPYTER_RUNTIME_DIR=str(runtime),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str) -> Cell:
        return run(self.kc, code)

    @property
    def stats_file(self) -> Path:
        """Where the kernel agent writes, once ``%load_ext jupyter_gpu`` has run."""
        return self.runtime / file_name(self.kernel_id)

    def close(self) -> None:
        """Stop it, unless the test already shut it down."""
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)


class CellRunner:
    """A front end's client of one kernel of the test server, for ``async with``: ready on
    entry, closed on exit. One runner can run many cells, as a notebook does."""

    def __init__(self, kernel: AsyncKernelManager) -> None:
        self.kernel = kernel
        self.client = kernel.client()

    async def __aenter__(self) -> CellRunner:
        self.client.start_channels()
        try:
            await self.client.wait_for_ready(timeout=60)
        except BaseException:
            self.client.stop_channels()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.client.stop_channels()

    async def run(self, code: str, cell_id: str | None = None, *, interrupt_on: str | None = None) -> Cell:
        """Run ``code`` as a notebook cell. ``cell_id`` goes in the request's metadata as
        JupyterLab sends it; ``interrupt_on``: interrupt the kernel once the cell prints that
        text (so a test knows the cell is running before it interrupts it)."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        request = self.client.session.msg(
            "execute_request", content, metadata={"cellId": cell_id} if cell_id else {}
        )
        self.client.shell_channel.send(request)
        msg_id = request["header"]["msg_id"]
        messages: list[dict[str, Any]] = []
        while True:
            msg = await self.client.get_iopub_msg(timeout=TIMEOUT)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(msg)
            kind, body = msg["msg_type"], msg["content"]
            if kind == "stream" and interrupt_on is not None and interrupt_on in body["text"]:
                await self.kernel.interrupt_kernel()
            elif kind == "status" and body["execution_state"] == "idle":
                break
        while True:
            reply = await self.client.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return Cell(reply["content"], messages)


async def execute(kernel: AsyncKernelManager, code: str) -> Cell:
    """Run one cell in ``kernel`` through a client of its own, as a second front end would."""
    async with CellRunner(kernel) as runner:
        return await runner.run(code)


async def run_cell(kernel: AsyncKernelManager, code: str) -> str:
    """What a cell that must succeed printed to stdout; its traceback is the failure if it did not."""
    cell = await execute(kernel, code)
    if not cell.ok:
        raise AssertionError(cell.traceback or f"the cell's status is {cell.status!r}")
    return cell.stream()
