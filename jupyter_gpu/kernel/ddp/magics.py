"""The ddp magics. Importing this module imports no torch; the magics import it when they run."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import cell_magic, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ...ddp.errors import BadInput
from ..extension import ShellMagics, cell_number, unregister_magics
from ..magic_args import quoted_path
from ..timeline import timeline_of
from ..torch_hook import after_torch_import
from . import args
from .args import cell_arguments, checkpoint_arguments, worker_arguments

M = TypeVar("M", bound=Callable[..., Any])


def usage_errors(method: M) -> M:
    """The rank runtime says what the user asked wrong as ``BadInput``: one ``UsageError`` line."""

    @functools.wraps(method)
    def wrapper(*a: Any, **k: Any) -> Any:
        try:
            return method(*a, **k)
        except BadInput as exc:
            raise UsageError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


@magics_class
class DDPMagics(ShellMagics):
    """Run notebook cells on N ranks with torch.distributed, once or in persistent workers."""

    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell)
        self.session: Any = None  # session.Session, imported lazily

    def _note_ranks(self, figures: dict[int, list[dict[str, Any]]]) -> None:
        """The ranks' own allocator figures join this cell's record in the timeline."""
        timeline = timeline_of(self.ipython)
        if timeline is not None:
            timeline.note_ranks(figures)

    def _label(self) -> str:
        return f"In[{cell_number(self.ipython)}]"

    @magic_arguments()
    @worker_arguments
    @cell_arguments
    @argument("script", nargs="?", help="line form: a Python script run on every rank, like torchrun")
    @argument("script_args", nargs=argparse.REMAINDER, help="arguments of the script")
    @no_var_expand
    @line_cell_magic
    @usage_errors
    def ddp_launch(self, line: str, cell: str | None = None) -> None:
        """Run the cell on N new ranks, torch.distributed initialised; or run a script like torchrun.

        In the cell, RANK, LOCAL_RANK, WORLD_SIZE, device (the rank's GPU, or CPU), torch and dist
        are defined; the process group uses nccl with a GPU per rank, else gloo. Ranks are
        started from a clean forkserver (never a fork of the kernel), so this works after the
        kernel has used CUDA. Notebook objects travel with --push a,b (cloudpickle). Every
        rank's value of --return (default _result) comes back as the dict _ddp (rank -> value,
        tensors on CPU). Rank 0's output is shown live (--output all: every rank, prefixed).
        A failing rank stops the others and its traceback is shown with this cell's line
        numbers; interrupting the kernel stops all ranks. The ranks' environment is torchrun's
        (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RUN_ID), so
        trainers made for torchrun (Hugging Face's Trainer, Lightning's Trainer(strategy="ddp",
        devices=N)) train in the ranks' process group as they are.

        With --slurm, in a kernel inside a Slurm allocation (salloc -N2 ..., then Jupyter):
        srun starts -n ranks on each node of the job (--nodes K: its first K), output lines
        are marked with node and rank, and the channel to the ranks is TLS with a session key;
        the job step ends with the cell, or with the kernel if it dies first.
        From a login node, --alloc "--nodes=2 --time=30" first asks Slurm for an allocation
        (salloc --no-shell with those options), showing where it waits in the queue; an
        interrupt while it waits cancels it. The kernel keeps it for every later --slurm
        launch until %ddp_stop or the kernel's end gives it back (scancel).

        Line form: %ddp_launch -n 2 train.py --epochs 3
        """
        ns = args.parse(self.ddp_launch, line)
        if cell is None and ns.slurm:  # before --alloc asks Slurm for anything
            raise UsageError("--slurm runs cells (%%ddp_launch --slurm); run a script with srun itself")
        _allocate(ns)
        options = args.worker_options(ns)
        self._note(args.device_note(options, ns))
        world = options.nproc * options.nnodes
        if cell is None:
            if not ns.script:
                raise UsageError("%ddp_launch needs a script (line form) or a cell (%%ddp_launch)")
            if ns.push or ns.return_name:
                raise UsageError("--push and --return apply to cells, not to scripts")
            from ...ddp.launch import run_script

            output = args.cell_options(ns, world, None).output
            run_script(options, ns.script, ns.script_args, output, ns.timeout)
            return
        if ns.script:
            raise UsageError(f"%%ddp_launch runs the cell; unexpected argument {ns.script!r}")
        cell_opts = args.cell_options(ns, world, "_result")
        from ...ddp.launch import pack, run_cell

        objects = pack(self.ipython.user_ns, cell_opts.push)
        self.ipython.user_ns["_ddp"] = run_cell(
            options, cell_opts, cell, objects, self._label(), on_figures=self._note_ranks
        )

    @magic_arguments()
    @worker_arguments
    @line_magic
    @usage_errors
    def ddp_start(self, line: str) -> None:
        """Start persistent ranks; then %%ddp cells run on all of them and keep their variables.

        Takes the worker options of %%ddp_launch (--slurm --alloc "...": in an allocation
        asked of Slurm, see there). Stop them with %ddp_stop; %ddp_restart replaces them
        with fresh ones (after a stuck or interrupted collective, for instance).

        With --slurm, in a kernel inside a Slurm allocation: one srun job step runs -n ranks on
        each node of the job (--nodes K: its first K) until %ddp_stop; %ddp_status shows the job,
        its nodes, the step's state and each rank's host. The step ends with the kernel, even
        when the kernel is killed.
        """
        ns = args.parse(self.ddp_start, line)
        _allocate(ns)
        options = args.worker_options(ns)
        if self.session is not None and self.session.alive:
            raise UsageError("DDP ranks are already running: %ddp_stop or %ddp_restart first")
        from ...ddp.session import Session

        self.close()  # a session whose ranks died: free its logs and rendezvous

        started = time.perf_counter()
        session = Session(options)
        session.start()
        self.session = session
        info = session.info[min(session.info)]
        hosts = sorted({i["host"] for i in session.info.values()}) if options.slurm else []
        print(
            f"{len(session.info)} ranks ready ({info['backend']} on {info['device'].split(':')[0]}) "
            f"in {time.perf_counter() - started:.1f} s"
            + (f" on {', '.join(hosts)}" if hosts else "")
            + ("; `mesh` and `shard(model)` are bound for FSDP2" if options.fsdp else "")
        )
        self._note(args.device_note(options, ns))

    @staticmethod
    def _note(note: str | None) -> None:
        if note:
            print(note)

    @magic_arguments()
    @cell_arguments
    @no_var_expand
    @cell_magic
    @usage_errors
    def ddp(self, line: str, cell: str) -> None:
        """Run the cell on the persistent ranks of %ddp_start, in their kept namespace.

        --return NAME sets _ddp to rank -> value; --timeout S interrupts the ranks after S
        seconds, as a kernel interrupt does.
        """
        ns = args.parse(self.ddp, line)
        session = self._session()
        cell_opts = args.cell_options(ns, session.gang.world_size if session.gang else 0, None)
        from ...ddp.launch import pack

        objects = pack(self.ipython.user_ns, cell_opts.push)
        result = session.run_cell(cell, cell_opts, objects, self._label(), on_figures=self._note_ranks)
        if result is not None:
            self.ipython.user_ns["_ddp"] = result

    @line_magic
    @usage_errors
    def ddp_push(self, line: str) -> None:
        """%ddp_push a b: send notebook objects (cloudpickle) to every persistent rank."""
        names = args.names(line, "%ddp_push")
        session = self._session()
        from ...ddp.launch import pack

        session.push(pack(self.ipython.user_ns, names))

    @line_magic
    @usage_errors
    def ddp_pull(self, line: str) -> dict[Any, Any]:
        """%ddp_pull x: rank -> value of x on the persistent ranks; several names: name -> (rank -> value)."""
        names = args.names(line, "%ddp_pull")
        values = self._session().pull(names)
        if len(names) == 1:
            return {rank: got[names[0]] for rank, got in values.items()}
        return {name: {rank: got[name] for rank, got in values.items()} for name in names}

    @line_magic
    @usage_errors
    def ddp_status(self, line: str) -> None:
        """Show the persistent ranks: pids, hosts, devices, cells run, where their logs are; with
        --slurm also the job, its nodes and the job step's state as Slurm tells it, and the
        allocation that --alloc holds."""
        print(
            self.session.status()
            if self.session is not None
            else "No DDP session; start one with %ddp_start -n N"
        )
        from ...ddp.slurm_alloc import describe

        self._note(describe())

    @line_magic
    @usage_errors
    def ddp_stop(self, line: str) -> None:
        """Stop the persistent ranks, and give back the Slurm allocation of --alloc (scancel)."""
        from ...ddp.slurm_alloc import release

        stopped = self.session is not None
        if self.session is not None:
            self.session.stop()
            self.session = None
        released = release()
        self._note(released)
        if not stopped and released is None:
            print("No DDP session to stop")

    @line_magic
    @usage_errors
    def ddp_restart(self, line: str) -> None:
        """Replace the persistent ranks with fresh ones (same options; their variables are lost)."""
        if self.session is None:
            raise UsageError("no DDP session to restart: %ddp_start -n N")
        self.session.restart()
        print(f"{len(self.session.info)} ranks ready")

    @magic_arguments()
    @checkpoint_arguments
    @line_magic
    @usage_errors
    def ddp_save(self, line: str) -> None:
        """Save the ranks' model (and optimizer) with torch.distributed.checkpoint (DCP).

        %ddp_save ckpt/step100 --model model --optimizer opt
        Every rank writes its shards; the folder appears only when all are written, and an older
        checkpoint of the same model there is replaced. It loads on any number of ranks
        (%ddp_load) and whole into the kernel (%ddp_load_local).
        """
        ns = args.parse(self.ddp_save, line)
        session = self._session()
        from ...ddp.checkpoint_files import resolve

        print(session.save(resolve(ns.path), *args.checkpoint_names(ns)))

    @magic_arguments()
    @checkpoint_arguments
    @line_magic
    @usage_errors
    def ddp_load(self, line: str) -> None:
        """Load a DCP checkpoint into the ranks' model (and optimizer), resharded to these ranks.

        %ddp_load ckpt/step100 --model model --optimizer opt
        """
        ns = args.parse(self.ddp_load, line)
        session = self._session()
        from ...ddp.checkpoint_files import resolve

        print(session.load(resolve(ns.path), *args.checkpoint_names(ns)))

    @magic_arguments()
    @argument("path", type=quoted_path, help="the checkpoint's folder")
    @argument(
        "--model",
        default=None,
        help="a model in this kernel to fill (one on the meta device is first made real on "
        "--device); without it the whole state dict is returned",
    )
    @argument("--device", default="cpu", help="where new tensors go: cpu (default), cuda or cuda:N")
    @argument("--force", action="store_true", help="load even when it needs more than the free memory")
    @line_magic
    @usage_errors
    def ddp_load_local(self, line: str) -> Any:
        """Load a checkpoint of the ranks whole into this kernel, no process group needed.

        model_state = %ddp_load_local ckpt/step100
        %ddp_load_local ckpt/step100 --model model
        """
        ns = args.parse(self.ddp_load_local, line)
        from .local_load import load_into_kernel

        return load_into_kernel(self.ipython.user_ns, ns.path, ns.model, ns.device, ns.force)

    def _session(self) -> Any:
        if self.session is None:
            raise UsageError("no DDP session: start one with %ddp_start -n N")
        return self.session

    def close(self) -> None:
        """Stop persistent ranks (on %unload_ext)."""
        if self.session is not None:
            self.session.stop()
            self.session = None


def _allocate(ns: argparse.Namespace) -> None:
    """``--alloc``: the kernel's allocation asked of Slurm before the launch needs it, its
    place in the queue shown in one line that updates in place."""
    request = args.alloc_request(ns)
    if request is None:
        return
    from ...ddp.slurm_alloc import request as ask

    line: Any = None

    def show(text: str) -> None:
        nonlocal line
        if line is None:
            line = display({"text/plain": text}, raw=True, display_id=True)
        else:
            line.update({"text/plain": text}, raw=True)

    ask(request, show)


def register(ipython: InteractiveShell) -> Callable[[], None]:
    """Add the ddp magics to ``ipython``; the returned function removes them and stops ranks.

    The rank forkserver starts in the background before the first %%ddp_launch needs it, so that
    launch does not wait for it to import torch (the kernel itself imports none): now with two
    or more GPUs visible, and with one once the notebook has imported torch (after that cell).
    It holds about 490 MB of host memory (torch's CUDA build) and no GPU memory:
    JUPYTER_GPU_DDP_PRESTART=0 (e.g. in a kernel spec of a shared server) leaves it to the first
    launch.
    """
    from ...ddp.forkserver import prestart_forkserver
    from ...nvml.visible import visible_gpus

    magics = DDPMagics(ipython)
    ipython.register_magics(magics)
    gpus = visible_gpus() if os.environ.get("JUPYTER_GPU_DDP_PRESTART", "1") != "0" else 0

    cancel = after_torch_import(ipython, prestart_forkserver) if gpus == 1 else None
    if gpus >= 2:
        prestart_forkserver()

    def undo() -> None:
        if cancel is not None:
            cancel()
        magics.close()
        from ...ddp.slurm_alloc import release

        with contextlib.suppress(BadInput):  # scancel failed: the watcher cancels it at exit
            release()
        unregister_magics(ipython, magics)

    return undo
