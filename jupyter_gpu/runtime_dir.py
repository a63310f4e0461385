"""The Jupyter runtime directory, where servers and kernels leave files for each other.

A server writes ``jpserver-<pid>.json`` there (its URL and token) and its kernels' connection
files; the kernel agent writes its stats file beside its connection file. The directory is
meant to be private, but often is not: ``JUPYTER_RUNTIME_DIR`` on a shared disk or under
``/tmp``, or a user's own code writing into it. So a file is read from it only through
``read_own_file``, which trusts nothing that another user could have put there.
"""

from __future__ import annotations

import errno
import os
import stat
import sys


class RefusedFile(Exception):
    """A file not to be trusted; the message finishes "the file …", e.g. ``is a symlink``."""


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
