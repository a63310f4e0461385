"""Fixture bodies the Slurm tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.slurm_cluster import SlurmCluster, need_slurm


def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A module fixture's body: a 2-node cluster of 2 CPUs each, checked to leave nothing behind."""
    need_slurm()
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus_per_node=2) as cluster:
        yield cluster
    assert cluster.leftovers() == []
