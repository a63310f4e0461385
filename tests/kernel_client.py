"""Running cells in kernels of the test jupyter_server, as a front end does: an execute request
(with JupyterLab's ``cellId`` when given), the cell's output on iopub until the kernel is idle
again, then its reply. The one way the server tests run code in a kernel.

Imported by name, as hub_support and fake_fleet are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType

from jupyter_client.manager import AsyncKernelManager

# Seconds to wait for each message: a cell's first CUDA call on a loaded machine takes a while.
TIMEOUT = 120


@dataclass
class Cell:
    """What one cell did: the reply's status and its outputs, in the order they came."""

    status: str  # 'ok', 'error' or 'aborted'
    outputs: list[tuple[str, str]] = field(default_factory=list)  # ('stream' or 'error', text)

    @property
    def printed(self) -> str:
        """What the cell printed (stdout and stderr)."""
        return "".join(text for kind, text in self.outputs if kind == "stream")

    @property
    def traceback(self) -> str:
        """The traceback the kernel showed, or '' if the cell raised nothing."""
        return "".join(text for kind, text in self.outputs if kind == "error")

    @property
    def output(self) -> str:
        """Everything the notebook would show under the cell, tracebacks included."""
        return "".join(text for _, text in self.outputs)

    @property
    def order(self) -> list[str]:
        """The outputs' kinds as they came: where a message lands beside a traceback matters."""
        return [kind for kind, _ in self.outputs]


class CellRunner:
    """A front end's client of one server-managed kernel, for ``async with``: ready on entry,
    closed on exit. One runner can run many cells, as a notebook does."""

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
        outputs: list[tuple[str, str]] = []
        while True:
            msg = await self.client.get_iopub_msg(timeout=TIMEOUT)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, body = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs.append((kind, body["text"]))
                if interrupt_on is not None and interrupt_on in body["text"]:
                    await self.kernel.interrupt_kernel()
            elif kind == "error":
                outputs.append((kind, "\n".join(body["traceback"])))
            elif kind == "status" and body["execution_state"] == "idle":
                break
        while True:
            reply = await self.client.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return Cell(reply["content"]["status"], outputs)


async def execute(kernel: AsyncKernelManager, code: str) -> Cell:
    """Run one cell in ``kernel`` through a client of its own, as a second front end would."""
    async with CellRunner(kernel) as runner:
        return await runner.run(code)


async def run_cell(kernel: AsyncKernelManager, code: str) -> str:
    """What a cell that must succeed printed; its traceback is the failure if it did not."""
    cell = await execute(kernel, code)
    if cell.status != "ok":
        raise AssertionError(cell.traceback or f"the cell's status is {cell.status!r}")
    return cell.printed
