"""Files opened once and checked: a FIFO refused at once, a mapping's file
checked against its maps line, a path under a process's root resolved with no
symbolic link followed."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys

import pytest

from cudaprobe.errors import LibraryNotFound
from cudaprobe.targets import procmaps
from cudaprobe.targets.openfile import Mapped, _open_in_root, open_node_file, superblock_device


def test_a_fifo_or_a_directory_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "libcudart.so.13"
    os.mkfifo(fifo)  # no writer: a blocking open would wait for good
    with pytest.raises(LibraryNotFound, match="not a regular file"):
        open_node_file(str(fifo))
    with pytest.raises(LibraryNotFound, match="a directory"):
        open_node_file(str(tmp_path))


def test_each_mapped_file_opens_as_the_file_its_line_names():
    files = procmaps.read_maps(os.getpid())
    python = os.stat(os.path.realpath(sys.executable))
    assert (python.st_dev, python.st_ino) in {f.identity for f in files}
    for f in files:
        opened = f.open()
        m = f.mapped
        st = opened.stat
        assert (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) == (m.major, m.minor,
                                                                         m.inode)
        assert opened.identity == f.identity
        assert os.path.samefile(opened.proc_path, f"/proc/self/fd/{opened.fd}")


def test_a_line_that_names_another_file_is_refused():
    f = procmaps.read_maps(os.getpid())[0]
    for wrong in (dataclasses.replace(f.mapped, inode=f.mapped.inode + 1),
                  dataclasses.replace(f.mapped, minor=f.mapped.minor + 1)):
        with pytest.raises(LibraryNotFound, match="not trusted"):
            procmaps.MappedFile(f.path, f.host_path, f.identity, wrong).open()


def test_under_the_process_root_no_symbolic_link_is_followed(tmp_path):
    """The path when /proc/PID/map_files is not ours to open (no CAP_SYS_ADMIN)."""
    real = tmp_path / "real" / "libx.so"
    real.parent.mkdir()
    shutil.copy(sys.executable, real)
    (tmp_path / "link.so").symlink_to(real)
    (tmp_path / "dir").symlink_to(real.parent)
    st = os.stat(real)

    def mapped(path) -> Mapped:
        return Mapped(os.getpid(), 0, 0, os.major(st.st_dev), os.minor(st.st_dev), st.st_ino,
                      str(path), str(path))

    fd = _open_in_root(mapped(real))
    try:
        assert os.path.samestat(os.fstat(fd), st)
    finally:
        os.close(fd)
    for through_a_link in (tmp_path / "link.so", tmp_path / "dir" / "libx.so"):
        with pytest.raises(LibraryNotFound, match="symbolic link"):
            _open_in_root(mapped(through_a_link))


def test_maps_lines_keep_every_field():
    line = procmaps.parse_maps(
        "7f1000000000-7f1000200000 r-xp 00010000 fd:01 77    /usr/lib/my lib.so\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
        "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n")
    assert line[0] == procmaps.MapLine(0x7F1000000000, 0x7F1000200000, "r-xp", 0x10000, 0xFD, 1,
                                       77, "/usr/lib/my lib.so")
    assert line[0].is_file and not line[1].is_file and line[2].path == ""


def test_the_file_system_device_is_the_one_maps_print():
    """Where stat's device is not the file system's (btrfs subvolumes), the one
    maps print is found through the descriptor's mount."""
    for f in procmaps.read_maps(os.getpid()):
        opened = f.open()
        assert superblock_device(opened.fd, os.getpid()) == (f.mapped.major, f.mapped.minor)
