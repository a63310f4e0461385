"""``python -m jupyter_gpu``: the same command line as ``jupyter gpu``."""

from .cli import main

raise SystemExit(main())
