"""What the kernel's cgroups say: where a process's controllers are mounted, its limits, and
how often the out-of-memory killer struck.

Pure functions over the text of ``/proc/<pid>/cgroup``, ``/proc/self/mountinfo`` and the
controllers' files, so that cgroup v1 and v2 test without either; the server's reader
(``container_limits.py``) hands the text in. A value that does not parse is ``None`` ("not
known"), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

# cgroup v1 writes "no limit" as the largest page count times the page size
# (9223372036854771712 on 4 KiB pages); anything this large is no limit.
NO_LIMIT_FROM = 2**62


@dataclass(frozen=True)
class Membership:
    """One line of ``/proc/<pid>/cgroup``: the process's path in one hierarchy."""

    version: int  # 1 or 2
    controllers: frozenset[str]  # empty for v2's single line
    path: str


@dataclass(frozen=True)
class Mount:
    """A cgroup file system in ``mountinfo``: which part of a hierarchy is shown where."""

    version: int
    controllers: frozenset[str]
    root: str  # the hierarchy's folder shown at ``point``
    point: str


def memberships(text: str) -> list[Membership]:
    """The lines of ``/proc/<pid>/cgroup`` (``ID:controllers:path``); malformed ones skipped."""
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            found.append(Membership(2, frozenset(), path))
        elif controllers:
            found.append(Membership(1, frozenset(controllers.split(",")), path))
    return found


def mounts(mountinfo: str) -> list[Mount]:
    """The cgroup mounts in ``/proc/self/mountinfo`` (``proc(5)``: fields, ``-``, type,
    source, super options; octal escapes in paths)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 4 or dash < 5:
            continue
        kind, options = fields[dash + 1], fields[dash + 3]
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if kind == "cgroup2":
            found.append(Mount(2, frozenset(), root, point))
        elif kind == "cgroup":
            known = {"rw", "ro"} | {o for o in options.split(",") if "=" in o and not o.startswith("name=")}
            found.append(Mount(1, frozenset(set(options.split(",")) - known), root, point))
    return found


def _unescape(path: str) -> str:
    r"""``mountinfo`` writes space, tab, newline and backslash as ``\040``, ``\011``, ``\012``, ``\134``."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def controller_folder(
    controller: str, member: list[Membership], mounted: list[Mount]
) -> tuple[str, int] | None:
    """The folder holding ``controller``'s files for the process, and the cgroup version; ``None``
    when the controller is not mounted here or the process's cgroup is outside what is shown
    (another container's tree). v1 wins where both have it: a v1 controller is absent from v2."""
    for line in member:
        if line.version != 1 or controller not in line.controllers:
            continue
        for mount in mounted:
            if mount.version == 1 and controller in mount.controllers:
                folder = _below(mount, line.path)
                if folder is not None:
                    return folder, 1
    for line in member:
        if line.version != 2:
            continue
        for mount in mounted:
            if mount.version == 2:
                folder = _below(mount, line.path)
                if folder is not None:
                    return folder, 2
    return None


def _below(mount: Mount, path: str) -> str | None:
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    rest = path[len(root) :].strip("/")
    if ".." in rest.split("/"):
        return None
    return mount.point.rstrip("/") + ("/" + rest if rest else "") or "/"


def limit(text: str | None) -> int | None:
    """A limit file's value: ``max`` (v2), ``-1`` or a v1 value past ``NO_LIMIT_FROM`` is no limit."""
    number = count(text)
    if number is None or number < 0 or number >= NO_LIMIT_FROM:
        return None
    return number


def count(text: str | None) -> int | None:
    """A file holding one integer (``memory.current``, ``pids.current``); ``None`` otherwise."""
    if text is None:
        return None
    word = text.strip()
    if word == "max" or not word.lstrip("-").isdigit() or len(word) > 20:
        return None
    return int(word)


def keyed(text: str | None) -> dict[str, int]:
    """``key value`` lines (``memory.events``, v1's ``memory.oom_control``, ``memory.stat``)."""
    found: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and len(parts[1]) <= 20:
            found[parts[0]] = int(parts[1])
    return found


def cpu_quota_v2(text: str | None) -> float | None:
    """CPUs allowed by ``cpu.max`` (``"200000 100000"`` is 2.0); ``None`` for ``max``."""
    parts = (text or "").split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = count(parts[0]), count(parts[1])
    return quota / period if quota and period else None


def cpu_quota_v1(quota: str | None, period: str | None) -> float | None:
    """CPUs allowed by ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``; ``None`` for ``-1``."""
    q, p = count(quota), count(period)
    return q / p if q is not None and q > 0 and p else None


def tightest(limits: list[int | None]) -> int | None:
    """The limit that binds: the smallest of a cgroup's and its ancestors' (``None``: none)."""
    set_ = [value for value in limits if value is not None]
    return min(set_) if set_ else None
