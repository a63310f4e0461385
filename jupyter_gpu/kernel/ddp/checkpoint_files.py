"""The kernel's side of a checkpoint folder: which folders may be loaded, and a save that
replaces nothing until it is complete.

A save writes into a fresh folder beside the target (``mkdtemp``: a random name nobody could
have planted) and renames it into place only when every rank has written; an older checkpoint
of the same model is replaced in one more rename, and anything else at the target is refused.
Loading unpickles DCP's ``.metadata``, and workshop folders are shared, so a checkpoint is
loaded only when it is the user's own: the folder and every file in it owned by this user and
writable by no one else, no links inside, its parent not a folder where others may rename it.
Each refusal is a ``UsageError``: the cell shows its one line, and nothing was written.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from IPython.core.error import UsageError

METADATA = ".metadata"  # DCP writes it last, on rank 0: a folder with it is a checkpoint


def resolve(text: str) -> Path:
    """The user's path made absolute against the kernel's working directory (the ranks may be
    somewhere else by now)."""
    if not text.strip():
        raise UsageError("give the checkpoint's folder: %ddp_save PATH --model NAME")
    return Path(os.path.abspath(os.path.expanduser(text.strip())))


def _owned(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def trusted(path: Path) -> Path:
    """``path`` if it is a checkpoint of this user's that nobody else could have changed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise UsageError(f"no checkpoint at {path}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} is not a checkpoint folder (DCP writes a folder)")
    if not (path / METADATA).is_file():
        raise UsageError(f"{path} holds no checkpoint (no {METADATA}: DCP writes it last)")
    parent = os.stat(path.parent)
    if parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX:
        raise UsageError(
            f"{path.parent} may be changed by every user, so {path.name} could have been swapped in; "
            "move the checkpoint to a folder of your own"
        )
    strangers = [path.name] if not _owned(st) else []
    with os.scandir(path) as entries:
        for entry in entries:
            est = entry.stat(follow_symlinks=False)
            if entry.is_symlink() or not stat.S_ISREG(est.st_mode) or not _owned(est):
                strangers.append(entry.name)
    if strangers:
        raise UsageError(
            f"{path} is not wholly yours ({', '.join(strangers[:3])}: another owner, writable by "
            "others, a link or not a plain file). Loading a checkpoint unpickles its metadata, "
            "which can run code: copy it into a folder of your own if you trust who made it"
        )
    return path


@dataclass
class PendingSave:
    """A save under way: ``folder`` is where the ranks write; ``replaces`` the older checkpoint
    of the same model that ``commit`` puts aside, if there is one."""

    target: Path
    folder: Path
    replaces: Path | None

    def commit(self) -> None:
        """Move the complete checkpoint into place (and the one it replaces out of the way)."""
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.folder, 0o777 & ~umask)  # as a plain mkdir would have made it
        if self.replaces is None:
            os.rename(self.folder, self.target)  # over nothing, or over an empty folder
            return
        old = self.target.with_name(f".{self.target.name}.old-{secrets.token_hex(4)}")
        os.rename(self.target, old)
        os.rename(self.folder, self.target)
        shutil.rmtree(old, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def begin_save(target: Path) -> PendingSave:
    """Check that ``target`` may be written (or replaced), and make the folder the ranks write."""
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"cannot save to {target}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot save to {target}: {parent} is not writable for you")
    replaces = None
    if os.path.lexists(target):
        if target.is_symlink() or not target.is_dir():
            raise UsageError(f"{target} exists and is not a checkpoint folder; nothing was written")
        if (target / METADATA).exists():
            replaces = trusted(target)
        elif any(target.iterdir()):
            raise UsageError(
                f"{target} is a folder that holds no checkpoint (no {METADATA}); nothing was written"
            )
    try:
        folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=parent))
    except OSError as exc:
        raise UsageError(f"cannot save to {target}: {exc.strerror or exc}") from None
    return PendingSave(target, folder, replaces)


def size(path: Path) -> tuple[int, int]:
    """(files, bytes) of a checkpoint folder."""
    files = [e for e in os.scandir(path) if e.is_file(follow_symlinks=False)]
    return len(files), sum(e.stat(follow_symlinks=False).st_size for e in files)


def saved_ranks(path: Path) -> int:
    """How many ranks wrote the checkpoint: DCP names each rank's file ``__<rank>_<n>.distcp``."""
    return len(
        {
            e.name.split("_")[2]
            for e in os.scandir(path)
            if e.name.startswith("__") and e.name.endswith(".distcp")
        }
    )
