"""The rank runtime and its launcher: what ``%%ddp_launch``, ``%ddp_start``/``%%ddp``, the
CLI's preflight and the cluster launchers share. Importable without IPython; torch is imported
only once a launch starts. ``worker`` and ``script`` run in the ranks.
"""
