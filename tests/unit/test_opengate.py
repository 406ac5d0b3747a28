"""The gate's reading of fanotify's records (cudaprobe/probe/opengate.py):
what one read gives is cut by the lengths the records give, never past the
buffer, and a record that is not a permission event with a descriptor is
not answered."""

from __future__ import annotations

import subprocess

from cudaprobe.probe.opengate import (
    FAN_OPEN_EXEC_PERM,
    FAN_OPEN_PERM,
    FAN_Q_OVERFLOW,
    METADATA,
    events,
    mount_points,
)

P = FAN_OPEN_PERM


def record(pid: int, fd: int, mask: int = FAN_OPEN_PERM, version: int = 3,
           length: int | None = None) -> bytes:
    return METADATA.pack(length if length is not None else METADATA.size, version, 0,
                         METADATA.size, mask, fd, pid)


def test_each_record_of_a_read_in_order():
    assert events(record(10, 5) + record(11, 6)) == [(10, 5, P), (11, 6, P)]


def test_a_record_longer_than_its_header_is_stepped_over_by_its_length():
    long = METADATA.pack(METADATA.size + 8, 3, 0, METADATA.size, FAN_OPEN_PERM, 7, 12)
    assert events(long + b"\0" * 8 + record(13, 8)) == [(12, 7, P), (13, 8, P)]


def test_a_truncated_record_ends_the_read():
    assert events(record(10, 5) + record(11, 6)[:10]) == [(10, 5, P)]


def test_a_length_shorter_than_a_header_or_another_version_ends_it():
    assert events(record(10, 5, length=4) + record(11, 6)) == []
    assert events(record(10, 5, version=2) + record(11, 6)) == []


def test_an_overflow_or_a_record_without_a_descriptor_is_not_answered():
    assert events(record(0, -1, mask=FAN_Q_OVERFLOW) + record(10, -1) + record(11, 6)) == [
        (11, 6, P)]


def test_an_exec_record_keeps_its_mask():
    assert events(record(10, 5, mask=FAN_OPEN_EXEC_PERM) + record(11, 6)) == [
        (10, 5, FAN_OPEN_EXEC_PERM), (11, 6, P)]


def test_mount_points_are_unescaped(tmp_path):
    """A mount point with a space (the kernel writes it as \\040) is found as
    its real path: mounted here as a tmpfs."""
    where = tmp_path / "a dir"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(where)], check=True)
    try:
        assert (str(where), "tmpfs") in mount_points()
    finally:
        subprocess.run(["umount", str(where)], check=True)
