"""A rank's traceback, captured as data and shown with the notebook cell's own line numbers."""

from __future__ import annotations

import os

from jupyter_gpu.ddp import errors
from jupyter_gpu.ddp.errors import DDPError, capture, cell_filename, render
from jupyter_gpu.ddp.outcome import Collected, Death
from jupyter_gpu.ddp.report import error_for

CELL = """%%ddp_launch -n 2
import math
def f(x):
    return math.sqrt(x)
y = f(-1)
"""


def run_as_rank(source: str, rank: int = 1) -> BaseException:
    """Compile and run ``source`` the way a rank does (magic line counted, rank file name)."""
    body = source.split("\n", 1)[1]
    code = compile("\n" + body, cell_filename(rank), "exec")
    try:
        exec(code, {})
    except BaseException as exc:  # noqa: BLE001 - whatever the cell raises is the subject
        return exc
    raise AssertionError("the cell did not raise")


def test_cell_frames_use_cell_numbers_and_text() -> None:
    text = "".join(render(capture(run_as_rank(CELL)), CELL, "In[7]"))
    assert "Cell In[7], line 5\n    y = f(-1)\n" in text
    assert "Cell In[7], line 4, in f\n    return math.sqrt(x)\n" in text
    assert text.endswith("ValueError: math domain error\n")
    assert "<ddp-cell" not in text


def test_frames_of_other_files_are_kept_as_python_shows_them() -> None:
    cell = "%%ddp\nimport json\njson.loads('{')\n"
    text = "".join(render(capture(run_as_rank(cell)), cell, "In[2]"))
    assert 'json/__init__.py", line' in text and "in loads" in text
    assert "json.decoder.JSONDecodeError" in text or "JSONDecodeError" in text


def test_frames_of_this_package_are_dropped() -> None:
    """The worker's exec frame is noise: the traceback starts at the cell."""
    worker_file = os.path.join(os.path.dirname(errors.__file__), "worker.py")
    runner = (
        "def run(code, ns):\n    try:\n        exec(code, ns)\n    except KeyError as e:\n        return e\n"
    )
    ns: dict = {}
    exec(compile(runner, worker_file, "exec"), ns)
    cell = "%%ddp\nraise KeyError('k')\n"
    code = compile("\n" + cell.split("\n", 1)[1], cell_filename(0), "exec")
    err = capture(ns["run"](code, {}))
    assert [f.filename for f in err.frames] == [cell_filename(0)]


def test_chained_exceptions_render_cause_first() -> None:
    cell = (
        "%%ddp\ntry:\n    1 / 0\nexcept ZeroDivisionError as e:\n    raise RuntimeError('wrapped') from e\n"
    )
    text = "".join(render(capture(run_as_rank(cell)), cell, "In[3]"))
    first, second = text.split("The above exception was the direct cause of the following exception:")
    assert "line 3" in first and "ZeroDivisionError" in first
    assert "line 5" in second and second.rstrip().endswith("RuntimeError: wrapped")


def test_syntax_error_points_into_the_cell() -> None:
    cell = "%%ddp\nx = 1\ny = (\n"
    try:
        compile("\n" + cell.split("\n", 1)[1], cell_filename(0), "exec")
    except SyntaxError as exc:
        err = capture(exc)
    text = "".join(render(err, cell, "In[4]"))
    assert "Cell In[4], line 3" in text and "SyntaxError" in text


def test_error_shows_its_lines_instead_of_a_kernel_traceback() -> None:
    err = DDPError("rank 1: ValueError: boom", ["Error on rank 1:\n", "ValueError: boom\n"])
    assert err._render_traceback_() == ["Error on rank 1:", "ValueError: boom"]
    assert str(err) == "rank 1: ValueError: boom"


def test_interrupt_is_a_keyboard_interrupt() -> None:
    assert issubclass(errors.DDPInterrupted, KeyboardInterrupt)
    assert issubclass(errors.DDPInterrupted, DDPError)


def _death(signal_name: str | None, exitcode: int, message: str = "") -> Death:
    return Death(
        rank=1,
        pid=4242,
        exitcode=exitcode,
        signal_name=signal_name,
        message=message,
        stderr_tail=["about to die"],
    )


def test_a_rank_that_raised_is_shown_by_its_exception_however_it_then_died() -> None:
    traceback = (
        'Traceback (most recent call last):\n  File "/w/train.py", line 8, in <module>\n'
        '    raise RuntimeError("script failed")\nRuntimeError: script failed\n'
    )
    err = error_for(Collected(death=_death("SIGABRT", -6, traceback)), [0, 1], "", "", None)
    text = "".join(err.lines)
    assert str(err) == "rank 1: RuntimeError: script failed"
    assert text.startswith("Error on rank 1 (pid 4242):\nTraceback (most recent call last):\n")
    assert text.endswith(
        "RuntimeError: script failed\n(rank 1 then was killed by SIGABRT)\n\n(rank 0 stopped)\n"
    )


def test_a_rank_killed_without_raising_is_shown_by_its_signal_and_last_words() -> None:
    err = error_for(Collected(death=_death("SIGKILL", -9)), [0, 1], "", "", None, stopped=False)
    assert str(err) == "rank 1 (pid 4242) was killed by SIGKILL (out of memory?)"
    assert err.lines == [
        "rank 1 (pid 4242) was killed by SIGKILL (out of memory?)\n",
        "last lines of rank 1's stderr:\n",
        "    about to die\n",
    ]
