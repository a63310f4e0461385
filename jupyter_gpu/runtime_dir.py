"""The Jupyter runtime directory, where servers and kernels leave files for each other.

A server writes ``jpserver-<pid>.json`` there (its URL and token) and its kernels' connection
files; the kernel agent writes its stats file beside its connection file. The directory is
meant to be private, but often is not: ``JUPYTER_RUNTIME_DIR`` on a shared disk or under
``/tmp``, or a user's own code writing into it. So a file is read from it only through
``read_own_file``, which trusts nothing that another user could have put there. Nor can another
user's file planted at a kernel's name in a shared sticky dir silence the kernel: ``own_path``
moves the kernel to a private name that only the kernel's owner can compute.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import sys
from collections.abc import Callable
from pathlib import Path

_CONNECTION_FILE = re.compile(r"kernel-(.+)\.json")
CONNECTION_MAX_BYTES = 64 * 1024  # a connection file is ~300 bytes
TAKEN = "a file of another user holds this kernel's name"


class RefusedFile(Exception):
    """A file not to be trusted; the message finishes "the file …", e.g. ``is a symlink``."""


class NameTaken(Exception):
    """Another user's file holds a kernel's name and the kernel has no file at its private name."""

    def __init__(self) -> None:
        super().__init__(TAKEN)


def connection_file() -> str | None:
    """This kernel's connection file; None outside an ipykernel (e.g. terminal IPython).

    Asks the ipykernel already loaded in this process, never imports one (which would import
    IPython into the command line, which shares this module).
    """
    ipykernel = sys.modules.get("ipykernel")
    if ipykernel is None:
        return None
    try:
        return ipykernel.get_connection_file()
    except (RuntimeError, OSError):
        return None


def beside_connection(name: Callable[[str], str], connection: str | None = None) -> tuple[Path, str] | None:
    """The path of a file this kernel publishes, ``name(kernel id)`` beside its connection file
    ``…/kernel-<id>.json`` (``connection_file()`` unless given), and the kernel id.

    Beside the connection file, because the server put that into its runtime dir, which may be
    configured away from ``jupyter_runtime_dir()``. None outside a kernel, or for a kernel id
    that ``name`` refuses (ValueError: it could leave the directory).
    """
    connection = connection if connection is not None else connection_file()
    match = _CONNECTION_FILE.fullmatch(os.path.basename(connection)) if connection else None
    if connection is None or match is None:
        return None
    kernel_id = match.group(1)
    try:
        return Path(connection).resolve().parent / name(kernel_id), kernel_id
    except ValueError:
        return None


def held_by_another(path: str | os.PathLike[str]) -> bool:
    """Whether another user's file, link or folder sits at ``path`` (in a sticky dir such as
    /tmp the kernel can neither replace nor remove it)."""
    try:
        return os.lstat(path).st_uid != os.geteuid()
    except OSError:
        return False


def private_name(directory: str | os.PathLike[str], kernel_id: str, name: str) -> str | None:
    """``name`` with a tag only the kernel's owner can compute, e.g. ``jupyter_gpu-kernel-<id>.<tag>.json``.

    The tag is an HMAC of the name under the key of the kernel's connection file ``kernel-<id>.json``
    in ``directory``, which the server wrote readable by this user alone: the kernel and its server
    find the name without telling each other, and nobody else can plant a file there in advance.
    None when the connection file cannot be trusted or has no key.
    """
    try:
        connection = json.loads(
            read_own_file(os.path.join(directory, f"kernel-{kernel_id}.json"), CONNECTION_MAX_BYTES)
        )
        key = connection["key"]
    except (OSError, RefusedFile, ValueError, KeyError, TypeError):
        return None
    if not isinstance(key, str) or not key:
        return None
    stem, suffix = os.path.splitext(name)
    return f"{stem}.{hmac.new(key.encode(), name.encode(), hashlib.sha256).hexdigest()[:32]}{suffix}"


def own_path(path: Path, kernel_id: str) -> Path:
    """Where kernel ``kernel_id`` publishes its file named ``path``: there, or at its private name
    beside it while another user's file holds ``path``. ``NameTaken`` when it has no private name.

    Asked before every write, since a name can be taken at any time in a directory others can write.
    """
    if not held_by_another(path):
        return path
    private = private_name(path.parent, kernel_id, path.name)
    if private is None:
        raise NameTaken
    return path.parent / private


def published_path(directory: str | os.PathLike[str], kernel_id: str, name: str) -> str:
    """Where the server reads kernel ``kernel_id``'s file ``name``, as ``own_path`` chose it;
    ``NameTaken`` when another user holds the name and the kernel has no file at its private name."""
    path = own_path(Path(directory) / name, kernel_id)
    if path.name != name and not os.path.lexists(path):
        raise NameTaken
    return os.fspath(path)


def read_own_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The content of ``path`` if it is a regular file of this user that only this user may write.

    ``RefusedFile`` otherwise: a symlink (``O_NOFOLLOW``: someone who can write the directory
    could point it anywhere), not a regular file (``O_NONBLOCK``: a FIFO planted under the name
    does not hang the reader), another user's file, a file others may write, an empty file, or
    one over ``max_bytes``. ``FileNotFoundError`` passes through: a missing file is no attack.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise RefusedFile("is a symlink") from None
        raise RefusedFile(f"cannot be opened: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile("is not a regular file")
        if info.st_uid != os.geteuid():
            raise RefusedFile("belongs to another user")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise RefusedFile("is writable by other users")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise RefusedFile(f"cannot be read: {error.strerror}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise RefusedFile(f"is larger than {max_bytes} bytes")
    if size == 0:
        raise RefusedFile("is empty")
    return b"".join(chunks)


def write_own_file(path: str | os.PathLike[str], data: bytes, *, abandon: Callable[[], bool] = bool) -> None:
    """Replace ``path`` with ``data`` atomically, mode 0600: readers see the old file or the new.

    The temp file has a random name and is created with O_EXCL and O_NOFOLLOW, so nothing planted
    in a directory others can write (a symlink, a FIFO, a file of theirs) is followed, opened or
    published under our name; the rename then replaces whatever sits at ``path``, links included,
    rather than writing through it. ``abandon`` is asked just before the rename: a writer that is
    being stopped must not resurrect a file just removed.
    """
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        if abandon():
            _unlink(tmp)
            return
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def remove_own_file(path: str | os.PathLike[str], max_bytes: int) -> None:
    """Delete a JSON file this process wrote (its ``pid`` field is ours); a kernel restarted
    under the same id reuses the name, and must not lose the new process's file."""
    try:
        owner = json.loads(read_own_file(path, max_bytes)).get("pid")
    except FileNotFoundError:
        return
    except (RefusedFile, ValueError, AttributeError):
        owner = os.getpid()  # unreadable or not one of ours: ours to clean up
    if owner == os.getpid():
        _unlink(os.fspath(path))


def remove_published(path: Path, kernel_id: str, max_bytes: int) -> None:
    """``remove_own_file`` at where ``own_path`` has kernel ``kernel_id`` publish ``path`` now."""
    try:
        remove_own_file(own_path(path, kernel_id), max_bytes)
    except NameTaken:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except (FileNotFoundError, PermissionError):  # gone, or planted by another user in a sticky dir
        pass
