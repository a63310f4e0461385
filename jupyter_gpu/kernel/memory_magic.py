"""``%gpu_mem``: this kernel's GPU memory, NVML's view beside PyTorch's allocator, with advice."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

# gpu_memory (NVML, psutil, urllib) is imported when a report is made, not at %load_ext.
from ..analysis.cells import cell_label, holders_now, largest_peaks
from ..analysis.fragmentation import AllocatorFigures, advise, expandable_segments_configured
from ..analysis.units import format_bytes, format_bytes_change
from ..report import Report, Section
from ..torch_state import nvml_uuid, torch_in_use
from .extension import unregister_magics
from .magic_args import parse as parse_args
from .segment_map import segment_map_svg
from .timeline import timeline_of

if TYPE_CHECKING:
    from ..nvml.holders import DeviceView

NO_CUDA = (
    "This kernel has not initialised CUDA, so it holds no GPU memory. jupyter_gpu never "
    "initialises CUDA for you: a CUDA context costs about 500 MiB in every process."
)
CSS_CLASS = "jupyter-gpu-mem"


def allocator_section(figures: AllocatorFigures) -> Section:
    """The allocator's figures in words; shared with the out-of-memory explanation."""
    s = Section("PyTorch allocator (this kernel)")
    s.add(
        "allocated",
        format_bytes(figures.allocated_bytes),
        f"in live tensors ({format_bytes(figures.requested_bytes)} requested, "
        f"{format_bytes(figures.rounding_waste_bytes)} rounding waste)",
    )
    s.add(
        "cached, unallocated",
        format_bytes(figures.reserved_unallocated_bytes),
        f"reserved {format_bytes(figures.reserved_bytes)} minus allocated",
    )
    ratio = figures.fragmentation
    stranded_note = "empty_cache() cannot return it"
    if ratio is not None:
        stranded_note = f"fragmentation {ratio:.1%} of reserved; {stranded_note}"
    s.add("  stranded", format_bytes(figures.inactive_split_bytes), stranded_note)
    s.add("  releasable", format_bytes(figures.releasable_bytes), "empty_cache() would return it")
    snapshot = figures.snapshot
    if snapshot is not None:
        largest = snapshot.largest_free_block_bytes
        s.add(
            "largest free block",
            format_bytes(largest["large"]),
            f"large pool; small pool {format_bytes(largest['small'])}; {snapshot.segments} segments"
            + ("; expandable segments" if snapshot.expandable else ""),
        )
    s.add(
        "peak allocated",
        format_bytes(figures.peak_allocated_bytes),
        f"alloc retries {figures.num_alloc_retries}, OOMs {figures.num_ooms}",
    )
    return s


def nvml_section(view: DeviceView | None, reason: str | None, figures: AllocatorFigures) -> Section:
    s = Section("NVML (the driver's view)")
    if view is None:
        s.add("unavailable", "", reason or "")
        return s
    s.add(
        "whole MIG device" if view.mig else "whole GPU",
        format_bytes(view.used_bytes),
        f"used of {format_bytes(view.total_bytes)}; {format_bytes(view.free_bytes)} free",
    )
    if view.this_kernel_bytes is None:
        s.add("this kernel", "n/a", reason or "the driver does not report per-process memory here")
    else:
        outside = view.this_kernel_bytes - figures.reserved_bytes
        s.add(
            "this kernel",
            format_bytes(view.this_kernel_bytes),
            f"{format_bytes(figures.reserved_bytes)} PyTorch cache + {format_bytes(max(0, outside))} "
            "outside it (CUDA context, cuBLAS/NCCL workspaces, other libraries)",
        )
    if not view.others:
        s.add("other processes", "none")
    else:
        s.add("other processes", format_bytes(view.others_bytes), f"{len(view.others)} process(es)")
        for holder in view.others:
            s.add("", format_bytes(holder.used_bytes), holder.label)
    return s


def device_report(torch: Any, device: int, *, draw: bool) -> Report:
    """Everything ``%gpu_mem`` shows for one CUDA device of this kernel."""
    from . import gpu_memory

    figures, segments = gpu_memory.allocator_view(torch, device)
    uuid = nvml_uuid(torch, device)
    view, reason = (
        (None, "torch does not report this GPU's UUID")
        if uuid is None
        else gpu_memory.device_view(uuid, labels=lambda: gpu_memory.server_labels(uuid))
    )
    name = f"{view.name} " if view and view.name else ""
    header = Section(f"GPU {device}: {name}({uuid or 'unknown UUID'})")
    advice = advise(
        figures,
        expandable_enabled=expandable_segments_configured(os.environ),
        device_total_bytes=view.total_bytes if view else None,
        other_processes_bytes=view.others_bytes if view else None,
    )
    sections = [header, nvml_section(view, reason, figures), allocator_section(figures)]
    if advice:
        sections.append(Section("Advice", notes=[a.message for a in advice]))
    return Report(sections, figure=segment_map_svg(segments or []) if draw else None, css_class=CSS_CLASS)


CELLS_LIMIT = 10


def _cell_note(cell: dict[str, Any]) -> str:
    peaks = [g["peak_allocated_bytes"] for g in cell["gpus"] if g["peak_allocated_bytes"] is not None]
    peak = f"peak {format_bytes(max(peaks))}, " if peaks else ""
    return f"{peak}{cell['wall_seconds']:.1f} s, {cell['outcome']}"


def cells_report(cells: list[dict[str, Any]]) -> Report:
    """Which cells hold this kernel's GPU memory: what each left allocated, and the highest peaks.

    A cell's peak is shown only when it raised the kernel's peak (torch's peak statistics are
    never reset, so that ``torch.cuda.max_memory_allocated()`` keeps its meaning for you).
    """
    on_gpu = [c for c in cells if c["gpus"]]
    heading = f"{len(cells)} cells recorded, {len(on_gpu)} of them with CUDA in use"
    holders = Section("Cells that left the most memory allocated")
    for cell, left in holders_now(on_gpu, CELLS_LIMIT):
        holders.add(f"cell {cell_label(cell)}", format_bytes_change(left), _cell_note(cell))
    if not holders.rows:
        holders.notes.append("No cell left memory allocated.")
    peaks = Section("Highest peaks")
    for cell, peak in largest_peaks(on_gpu, CELLS_LIMIT):
        peaks.add(f"cell {cell_label(cell)}", format_bytes(peak), f"left {format_bytes_change(_left(cell))}")
    if not peaks.rows:
        peaks.notes.append("No cell raised the allocator's peak.")
    return Report([holders, peaks], heading=heading, css_class=CSS_CLASS)


def _left(cell: dict[str, Any]) -> int:
    return sum(g["allocated_change_bytes"] for g in cell["gpus"])


def no_cuda_report() -> Report:
    from . import gpu_memory

    section = Section("This kernel")
    section.add(
        "CUDA", "not initialised", "torch is imported" if "torch" in sys.modules else "torch is not imported"
    )
    gpus, reason = gpu_memory.all_devices()
    machine = Section("GPUs on this machine (NVML numbering)")
    if not gpus:
        machine.add("unavailable", "", reason or "")
    for gpu in gpus:
        mig = gpu.get("mig")
        machine.add(
            f"GPU {gpu['index']}"
            if mig is None
            else f"GPU {mig['parent_index']} · MIG {mig['profile'] or ''}",
            format_bytes(gpu.get("memory_used_bytes")),
            f"used of {format_bytes(gpu.get('memory_total_bytes'))}: {gpu.get('name') or ''}",
        )
    return Report([section, machine], heading=NO_CUDA, css_class=CSS_CLASS)


@magics_class
class GpuMemMagics(Magics):
    @magic_arguments()
    @argument(
        "--device", "-d", type=int, default=None, help="CUDA device index; default: the current device."
    )
    @argument(
        "--snapshot",
        action="store_true",
        help="Also draw the allocator's segments, blocks coloured by state.",
    )
    @argument(
        "--cells",
        action="store_true",
        help="Which cells hold the memory: what each cell left allocated, and the highest peaks.",
    )
    @line_magic
    def gpu_mem(self, line: str) -> None:
        """Show this kernel's GPU memory: what the driver (NVML) says the process holds beside
        what PyTorch's caching allocator has allocated, cached and stranded, the largest free
        block, retries and OOMs, who else holds memory on the GPU, and advice where it applies.

        Never initialises CUDA: before your code has used CUDA it says so.
        """
        args = parse_args(self.gpu_mem, line)
        if args.cells:
            timeline = timeline_of(self.shell)
            display(cells_report(timeline.cells() if timeline else []))
            return
        torch = torch_in_use()
        if torch is None:
            display(no_cuda_report())
            return
        count = torch.cuda.device_count()
        device = torch.cuda.current_device() if args.device is None else args.device
        if not 0 <= device < count:
            raise UsageError(f"--device {device}: this kernel sees CUDA devices 0 to {count - 1}.")
        display(device_report(torch, device, draw=args.snapshot))


def register(ipython: Any) -> Callable[[], None]:
    magics = GpuMemMagics(ipython)
    ipython.register_magics(magics)
    return lambda: unregister_magics(ipython, magics)
