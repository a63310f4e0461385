"""Every magic that takes options answers a malformed line with one UsageError, no traceback."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.testing import globalipapp

from jupyter_gpu.kernel import extension

LINE_MAGICS = ["gpu_mem", "gpu_monitor", "gpu_doctor", "gpu_warmup", "amp", "ddp_launch", "ddp_start"]
CELL_MAGICS = ["amp", "gpu_warmup", "gpu_profile", "ddp_launch", "ddp"]


@pytest.fixture(scope="module")
def ip():  # type: ignore[no-untyped-def]
    globalipapp.start_ipython()
    shell = globalipapp.get_ipython()
    extension.load(shell)
    yield shell
    extension.unload(shell)


@pytest.mark.parametrize("line", ["'", '--device "0'])
@pytest.mark.parametrize("name", LINE_MAGICS)
def test_unbalanced_quotes_in_line_magics(ip, name: str, line: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="cannot read the arguments"):
        ip.run_line_magic(name, line)


@pytest.mark.parametrize("name", CELL_MAGICS)
def test_unbalanced_quotes_in_cell_magics(ip, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="cannot read the arguments"):
        ip.run_cell_magic(name, "'", "x = 1")
