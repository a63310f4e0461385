"""``jupyter gpu`` (also ``jupyter-gpu`` and ``python -m jupyter_gpu``): the package from a terminal.

For instructors and for front ends without the JupyterLab sidebar: ``status``, ``pick``, ``doctor``,
``warmup``, ``preflight`` and ``grafana``. Each subcommand is a module with ``add_parser`` and ``run``;
torch is imported only inside the ``run`` of the subcommands that need a GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import doctor, grafana, pick, preflight, status, warmup
from .common import EXIT_USAGE, CliError

SUBCOMMANDS = (status, pick, doctor, warmup, preflight, grafana)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jupyter gpu",
        description="GPU status, diagnosis, warm-up and pre-flight checks for Jupyter users and workshop hosts.",
        epilog="Exit codes: 0 ok, 1 a check failed or a server could not be asked, 2 bad arguments, 3 no usable GPU.",
    )
    commands = p.add_subparsers(dest="command", metavar="{status,pick,doctor,warmup,preflight,grafana}")
    for module in SUBCOMMANDS:
        module.add_parser(commands)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command is None:
        p.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.run(args)
    except CliError as error:
        print(f"jupyter gpu {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"jupyter gpu {args.command}: interrupted", file=sys.stderr)
        return 130
