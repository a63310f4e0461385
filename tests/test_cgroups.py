"""Reading a container's cgroups: v1 and v2 as Docker, Kubernetes and systemd lay them out, and
the broken or foreign text a container may show."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpu import container_limits
from jupyter_gpu.analysis import cgroups

V1_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
"""
V1_CGROUP = """\
12:pids:/docker/abc
8:memory:/docker/abc/kernels
4:cpu,cpuacct:/docker/abc
1:name=systemd:/docker/abc
"""
V2_MOUNTINFO = (
    "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
)


def test_v1_controllers_are_found_below_the_part_of_the_tree_the_container_sees():
    member, mounted = cgroups.memberships(V1_CGROUP), cgroups.mounts(V1_MOUNTINFO)
    assert cgroups.controller_folder("memory", member, mounted) == ("/sys/fs/cgroup/memory/kernels", 1)
    assert cgroups.controller_folder("cpu", member, mounted) == ("/sys/fs/cgroup/cpu,cpuacct/docker/abc", 1)
    assert cgroups.controller_folder("pids", member, mounted) == ("/sys/fs/cgroup/pids/docker/abc", 1)


def test_v2_with_a_cgroup_namespace_and_with_the_host_tree():
    mounted = cgroups.mounts(V2_MOUNTINFO)
    assert cgroups.controller_folder("memory", cgroups.memberships("0::/\n"), mounted) == (
        "/sys/fs/cgroup",
        2,
    )
    path = "0::/kubepods.slice/pod1/cri-abc.scope\n"
    assert cgroups.controller_folder("memory", cgroups.memberships(path), mounted) == (
        "/sys/fs/cgroup/kubepods.slice/pod1/cri-abc.scope",
        2,
    )


def test_a_cgroup_outside_the_mounted_tree_is_not_known_rather_than_guessed():
    member = cgroups.memberships("8:memory:/other/container\n")
    assert cgroups.controller_folder("memory", member, cgroups.mounts(V1_MOUNTINFO)) is None
    escape = cgroups.memberships("8:memory:/docker/abc/../../etc\n")
    assert cgroups.controller_folder("memory", escape, cgroups.mounts(V1_MOUNTINFO)) is None


def test_escaped_mount_points_and_garbage_lines():
    text = "1 2 0:1 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\nnot a line\n7 - -\n"
    assert cgroups.mounts(text) == [cgroups.Mount(2, frozenset(), "/", "/sys/fs/my cgroup")]
    assert cgroups.memberships("garbage\n3:memory\n0::relative\n") == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("max\n", None),
        ("-1\n", None),
        ("9223372036854771712\n", None),  # v1's "no limit"
        ("1610612736\n", 1610612736),
        ("", None),
        ("12abc", None),
        ("9" * 400, None),
    ],
)
def test_limit_files(text, value):
    assert cgroups.limit(text) == value


def test_keyed_files_and_cpu_quotas():
    events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
    assert cgroups.keyed(events)["oom_kill"] == 2
    assert cgroups.keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")["oom_kill"] == 5
    assert cgroups.keyed("oom_kill lots\nx\n") == {}
    assert cgroups.cpu_quota_v2("200000 100000\n") == 2.0
    assert cgroups.cpu_quota_v2("max 100000\n") is None
    assert cgroups.cpu_quota_v1("150000", "100000") == 1.5
    assert cgroups.cpu_quota_v1("-1", "100000") is None
    assert cgroups.tightest([None, 8 << 30, 2 << 30]) == 2 << 30 and cgroups.tightest([None]) is None


def _fake_v2(tmp_path: Path, *, parent_max: str, own_max: str) -> Path:
    """A /proc and a cgroup2 tree as a Kubernetes pod shows them: the pod's limit on the parent."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    root = tmp_path / "cg"
    own = root / "pod" / "ctr"
    own.mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/pod/ctr\n")
    (proc / "self" / "mountinfo").write_text(f"29 23 0:26 / {root} rw - cgroup2 cgroup2 rw\n")
    (root / "pod" / "memory.max").write_text(parent_max)
    (own / "memory.max").write_text(own_max)
    (own / "memory.current").write_text("1073741824\n")
    (own / "memory.events").write_text("oom 1\noom_kill 1\n")
    (own / "cpu.max").write_text("400000 100000\n")
    (own / "pids.max").write_text("4096\n")
    (own / "pids.current").write_text("37\n")
    return proc


def test_the_reader_takes_the_tightest_limit_on_the_way_up(tmp_path):
    proc = _fake_v2(tmp_path, parent_max="1610612736\n", own_max="max\n")
    limits = container_limits.read(proc=str(proc), shm=str(tmp_path))
    assert limits.cgroup_version == 2
    assert (limits.memory_limit_bytes, limits.memory_usage_bytes, limits.oom_kills) == (
        1610612736,
        1 << 30,
        1,
    )
    assert (limits.cpu_quota, limits.pids_limit, limits.pids_current) == (4.0, 4096, 37)
    assert limits.shm_size_bytes and limits.unavailable == {}


def test_the_reader_says_why_when_there_is_nothing_to_read(tmp_path):
    limits = container_limits.read(proc=str(tmp_path / "absent"), shm=str(tmp_path / "no-shm"))
    assert limits.memory_limit_bytes is None
    assert set(limits.unavailable) == {"memory", "cpu", "pids", "shm"}
    assert limits.unavailable["memory"].startswith("cannot read")
