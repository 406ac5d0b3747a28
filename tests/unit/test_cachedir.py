"""targets/cachedir.py: a cache is used only where no one but root (or we)
can change it, every directory on the way and each link included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudaprobe.targets import cachedir

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_a_directory_of_ours_is_trusted(tmp_path):
    d = tmp_path / "cache" / "cudaprobe"
    assert cachedir.trusted_dir(d) == (Path(os.path.realpath(d)), "")
    assert d.is_dir()


def test_a_directory_writable_by_others_is_not(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    assert cachedir.unsafe_path(d / "x") == f"{d} is writable by others"
    assert cachedir.trusted_dir(d / "cudaprobe") == (None, f"{d} is writable by others")
    assert not (d / "cudaprobe").exists()  # nothing made in it


def test_a_sticky_directory_of_roots_is_a_way_not_a_cache():
    if os.stat("/tmp").st_uid != 0 or not os.stat("/tmp").st_mode & 0o1000:
        pytest.skip("/tmp is not root's sticky directory here")
    assert cachedir.unsafe_path(Path("/tmp"), sticky_ok=True) == ""
    assert cachedir.unsafe_path(Path("/tmp")) == "/tmp is writable by others"


@needs_root
def test_another_users_directory_or_link_on_the_way_is_not_trusted(tmp_path):
    theirs = tmp_path / "theirs"
    (theirs / "cudaprobe").mkdir(parents=True)
    os.chown(theirs, NOBODY, NOBODY)
    assert cachedir.unsafe_path(theirs / "cudaprobe") == f"{theirs} is owned by uid {NOBODY}"
    # a link of ours to it: followed, and what it leads through is checked
    (tmp_path / "link").symlink_to(theirs)
    assert cachedir.unsafe_path(tmp_path / "link" / "cudaprobe") == \
        f"{theirs} is owned by uid {NOBODY}"
    # a link to a directory of ours is fine
    (tmp_path / "ours").mkdir()
    (tmp_path / "link2").symlink_to("ours")
    assert cachedir.unsafe_path(tmp_path / "link2") == ""


@needs_root
def test_a_file_is_opened_only_if_ours_and_not_followed(tmp_path):
    (tmp_path / "good").write_bytes(b"x")
    fd, why = cachedir.open_trusted(tmp_path / "good")
    assert why == "" and os.read(fd, 1) == b"x"
    os.close(fd)
    assert cachedir.open_trusted(tmp_path / "missing") == (None, "")
    (tmp_path / "theirs").write_bytes(b"y")
    os.chown(tmp_path / "theirs", NOBODY, NOBODY)
    assert cachedir.open_trusted(tmp_path / "theirs") == \
        (None, f"{tmp_path / 'theirs'} is owned by uid {NOBODY}")
    (tmp_path / "link").symlink_to(tmp_path / "good")
    assert cachedir.open_trusted(tmp_path / "link")[0] is None  # O_NOFOLLOW: ELOOP
    os.mkfifo(tmp_path / "fifo")
    assert cachedir.open_trusted(tmp_path / "fifo") == \
        (None, f"{tmp_path / 'fifo'} is not a regular file")


def test_a_new_file_replaces_atomically_and_leaves_nothing_on_failure(tmp_path):
    def fill(fd: int, tmp: str) -> None:
        os.write(fd, b"table")
    cachedir.write_new(tmp_path, "entry", fill)
    assert (tmp_path / "entry").read_bytes() == b"table"

    def fail(fd: int, tmp: str) -> None:
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        cachedir.write_new(tmp_path, "other", fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_root_keeps_its_cache_out_of_home(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDAPROBE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = cachedir.SYSTEM_CACHE if os.geteuid() == 0 else tmp_path / "cudaprobe"
    assert cachedir.cache_root("CUDAPROBE_CACHE") == expected
