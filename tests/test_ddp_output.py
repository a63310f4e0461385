"""Copying the ranks' log files into a cell: prefixes, partial lines, rank selection."""

from __future__ import annotations

from pathlib import Path

from jupyter_gpu.ddp.output import CellStreams, LogPump, tail


class FakeCell(CellStreams):
    """Collects what would have gone to the notebook."""

    def __init__(self) -> None:
        self.header = None
        self.text: list[tuple[str, str]] = []

    def write(self, name: str, text: str) -> None:
        self.text.append((name, text))

    def flush(self) -> None:
        pass

    def joined(self, name: str = "stdout") -> str:
        return "".join(t for n, t in self.text if n == name)


def logs(tmp_path: Path, ranks: int) -> dict[int, tuple[str, str]]:
    return {r: (str(tmp_path / f"{r}.out"), str(tmp_path / f"{r}.err")) for r in range(ranks)}


def append(path: str, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


def test_all_ranks_are_prefixed_at_line_starts_only(tmp_path: Path) -> None:
    files = logs(tmp_path, 2)
    pump, cell = LogPump(files), FakeCell()
    pump.set_target(cell, None)
    append(files[0][0], "epoch 1 ")
    append(files[1][1], "warning\n")
    pump.drain()
    append(files[0][0], "done\n 10%\r 20%\r")
    pump.drain()
    assert cell.joined() == "[rank 0] epoch 1 done\n[rank 0]  10%\r[rank 0]  20%\r"
    assert cell.joined("stderr") == "[rank 1] warning\n"
    pump.stop()


def test_one_rank_shown_without_prefix_and_others_not_replayed_later(tmp_path: Path) -> None:
    files = logs(tmp_path, 2)
    pump, first = LogPump(files), FakeCell()
    pump.set_target(first, (1,))
    append(files[0][0], "rank 0 text\n")
    append(files[1][0], "rank 1 text\n")
    pump.drain()
    assert first.joined() == "rank 1 text\n"
    second = FakeCell()
    pump.set_target(second, None)
    append(files[0][0], "new\n")
    pump.drain()
    assert second.joined() == "[rank 0] new\n"  # rank 0's old line belonged to the first cell
    pump.stop()


def test_output_before_the_first_cell_is_kept_for_it(tmp_path: Path) -> None:
    files = logs(tmp_path, 1)
    pump = LogPump(files)
    pump.start()
    append(files[0][0], "early\n")
    pump.drain()  # no target yet: nothing is read
    cell = FakeCell()
    pump.set_target(cell, (0,))
    pump.drain()
    assert cell.joined() == "early\n"
    pump.stop()
    pump.stop()  # twice is fine


def test_tail_gives_the_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "err.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(str(path), 3) == ["line 97", "line 98", "line 99"]
    assert tail(str(tmp_path / "missing.log")) == []
