"""The kernel's side of a checkpoint folder: which folders may be loaded, and a save that
replaces nothing until it is complete.

Loading unpickles DCP's ``.metadata`` (and ``torch.load``s parts of the shard files), and
workshop folders are shared, so a checkpoint is used only where no one else could have put or
swapped anything: the folder and every file in it are the user's and writable by no one else,
and so is every folder on the way to it from ``/`` (ssh's StrictModes rule). A folder others may
write counts only if it is sticky and belongs to root or the user, as ``/tmp`` does, because
then nobody else can rename what the user keeps in it. Checking a path once is then enough:
nobody else can change what it names before the ranks read it. Symbolic links on the way are
resolved first and their targets checked the same way.

A save writes into a fresh folder beside the target (``mkdtemp``: a random name in a folder
only the user may change) and renames it into place once every rank has written. An older
checkpoint of the same model is replaced in a second rename, undone if that one fails.
Anything else at the target is refused. Every refusal is a ``BadInput``: the cell shows
one line and nothing was written. The save holds an ``flock`` on its folder, so the next save
of the same checkpoint can tell a folder left by a killed kernel (removed, if it is the user's
own real folder) from one a save in another kernel is still writing (left alone).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BadInput

METADATA = ".metadata"  # DCP writes it last, on rank 0: a folder with it is a checkpoint
NOT_WRITABLE_BY_OTHERS = 0o022
PARTIAL = ".{}.partial-"  # the prefix of a save's folder beside its target
_RANDOM_TAIL = re.compile(r"[a-z0-9_]{8}")  # what mkdtemp appends to it
MAX_STALE = 16  # folders of unfinished saves removed by one save


def resolve(folder: str) -> Path:
    """The user's folder (unquoted by the magic's parser) made absolute against the kernel's
    working directory (the ranks may be somewhere else by now). Links in the folders above are
    resolved; a link at the last name is left for the caller to refuse, never followed."""
    path = Path(os.path.abspath(os.path.expanduser(folder)))
    return Path(os.path.realpath(path.parent)) / path.name


def _says(path: Path, exc: OSError) -> str:
    return f"{path}: {exc.strerror or exc}"


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & NOT_WRITABLE_BY_OTHERS)


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not _writable_by_others(st)


def safe_folder(folder: Path) -> None:
    """Refuse ``folder`` unless it and every folder above it are such that only the user (or
    root) can add, remove or rename what they hold."""
    for current in (folder, *folder.parents):
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise BadInput(f"{current} does not exist") from None
        except OSError as exc:
            raise BadInput(_says(current, exc)) from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{current} is not a folder")
        owner_ok = st.st_uid in (0, os.getuid())
        sticky_ok = bool(st.st_mode & stat.S_ISVTX) and owner_ok
        if not owner_ok or (_writable_by_others(st) and not sticky_ok):
            who = "another user" if not owner_ok else "its group or every user"
            raise BadInput(
                f"{current} may be changed by {who}, so a checkpoint below it could be swapped "
                "for someone else's (loading one unpickles it, which can run code). Keep "
                "checkpoints in folders only you can write (chmod g-w,o-w), or below /tmp"
            )


def trusted(path: Path) -> Path:
    """``path`` if it is a checkpoint of this user's that nobody else could have changed."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise BadInput(
            f"no checkpoint at {path}" if isinstance(exc, FileNotFoundError) else _says(path, exc)
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{path} is not a checkpoint folder (DCP writes a folder)")
    if not (path / METADATA).is_file():
        raise BadInput(f"{path} holds no checkpoint (no {METADATA}: DCP writes it last)")
    safe_folder(path.parent)
    strangers = [path.name] if not _ours(st) else []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                est = entry.stat(follow_symlinks=False)
                if entry.is_symlink() or not stat.S_ISREG(est.st_mode) or not _ours(est):
                    strangers.append(entry.name)
    except OSError as exc:
        raise BadInput(_says(path, exc)) from None
    if strangers:
        raise BadInput(
            f"{path} is not wholly yours ({', '.join(strangers[:3])}: another owner, writable by "
            "others, a link or not a plain file). Loading a checkpoint unpickles its metadata, "
            "which can run code: copy it into a folder of your own if you trust who made it"
        )
    return path


@dataclass
class PendingSave:
    """A save under way: ``folder`` is where the ranks write, locked by ``lock`` (a descriptor,
    -1 where the file system has no locks); ``replaces`` the older checkpoint of the same model
    that ``commit`` puts aside, if there is one; ``cleared`` the folders of unfinished saves of
    the target that were removed first."""

    target: Path
    folder: Path
    replaces: Path | None
    lock: int = -1
    cleared: list[str] = field(default_factory=list)

    def commit(self) -> str:
        """Move the complete checkpoint into place; notes on what was cleared or stayed behind."""
        try:
            left = self._move()
        finally:
            self._unlock()
        if self.cleared:
            left = f"; removed {', '.join(self.cleared)}, left by a save that never finished" + left
        return left

    def _move(self) -> str:
        try:
            self._share()
            if self.replaces is None:
                os.rename(self.folder, self.target)  # over nothing, or over an empty folder of ours
                return ""
            old = self.target.with_name(f".{self.target.name}.old-{secrets.token_hex(4)}")
            os.rename(self.target, old)
            try:
                os.rename(self.folder, self.target)
            except OSError:
                os.rename(old, self.target)  # the previous checkpoint back where it was
                raise
        except OSError as exc:
            raise BadInput(
                f"cannot save to {self.target}: {exc.strerror or exc}; nothing was replaced"
            ) from None
        shutil.rmtree(old, ignore_errors=True)
        return f"; the replaced checkpoint could not be removed, it is at {old}" if old.exists() else ""

    def _share(self) -> None:
        """Modes as the user's umask would make them, but writable by the user alone, so that the
        checkpoint passes ``trusted`` (a umask of 002 would make it group-writable)."""
        umask = os.umask(0)
        os.umask(umask)
        keep = ~umask & ~NOT_WRITABLE_BY_OTHERS
        with os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    os.chmod(entry.path, 0o666 & keep)
        os.chmod(self.folder, 0o777 & keep)

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self._unlock()

    def _unlock(self) -> None:
        if self.lock >= 0:
            os.close(self.lock)  # releases the flock
            self.lock = -1


def _locked(folder: Path) -> int:
    """A descriptor holding an exclusive ``flock`` on ``folder``; -1 if it cannot be had (held
    by a running save, or a file system without locks)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return -1
    return fd


def _clear_unfinished(target: Path) -> list[str]:
    """Remove the folders that saves of ``target`` left when their kernel was killed before the
    rename: only real folders (never a link) of this user, with the name a save gives them, and
    not locked by a save still running. Their names, as removed."""
    prefix = PARTIAL.format(target.name)
    found: list[str] = []
    try:
        with os.scandir(target.parent) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and _RANDOM_TAIL.fullmatch(entry.name[len(prefix) :]):
                    found.append(entry.name)
                    if len(found) == MAX_STALE:
                        break
    except OSError:
        return []
    removed = []
    for name in found:
        path = target.parent / name
        fd = _locked(path)  # opened without following a link
        if fd < 0:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue
            # the folder above is the user's (safe_folder), so nobody else can swap this name now
            shutil.rmtree(path, ignore_errors=True)  # never follows links inside
            if not os.path.lexists(path):
                removed.append(name)
        finally:
            os.close(fd)
    return removed


def begin_save(target: Path) -> PendingSave:
    """Check that ``target`` may be written (or replaced), and make the folder the ranks write."""
    parent = target.parent
    safe_folder(parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"cannot save to {target}: {parent} is not writable for you")
    replaces = None
    if os.path.lexists(target):
        if target.is_symlink() or not target.is_dir():
            raise BadInput(f"{target} exists and is not a checkpoint folder; nothing was written")
        if (target / METADATA).exists():
            replaces = trusted(target)
        elif any(target.iterdir()):
            raise BadInput(
                f"{target} is a folder that holds no checkpoint (no {METADATA}); nothing was written"
            )
    cleared = _clear_unfinished(target)  # before mkdtemp: a full disk gets their room back
    try:
        folder = Path(tempfile.mkdtemp(prefix=PARTIAL.format(target.name), dir=parent))
    except OSError as exc:
        raise BadInput(f"cannot save to {target}: {exc.strerror or exc}") from None
    return PendingSave(target, folder, replaces, _locked(folder), cleared)


def size(path: Path) -> tuple[int, int]:
    """(files, bytes) of a checkpoint folder."""
    with os.scandir(path) as entries:
        sizes = [e.stat(follow_symlinks=False).st_size for e in entries if e.is_file(follow_symlinks=False)]
    return len(sizes), sum(sizes)


def saved_ranks(path: Path) -> int:
    """How many ranks wrote the checkpoint: DCP names each rank's file ``__<rank>_<n>.distcp``."""
    with os.scandir(path) as entries:
        return len(
            {e.name.split("_")[2] for e in entries if e.name.startswith("__") and e.name.endswith(".distcp")}
        )
