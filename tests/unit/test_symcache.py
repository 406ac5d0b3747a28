"""targets/symcache.py: only tables of files no one else could have written
are kept, and an entry that is not as written is read as absent."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from cudaprobe.targets import elfsyms, symcache
from cudaprobe.targets.elfsyms import read_symbols

NOBODY = 65534
LIBRARY = "/usr/lib/x86_64-linux-gnu/libc.so.6"


@pytest.fixture(autouse=True)
def tables_read_here(monkeypatch):
    """The tables read so far in this process forgotten: a table is kept by its
    file, under the name it was first read by, and a test before (in the same
    worker) may have read libc through /proc/PID/map_files, a name never trusted."""
    monkeypatch.setattr(elfsyms, "_TABLES", type(elfsyms._TABLES)())


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPROBE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "symbols"


def test_a_table_of_a_root_file_is_kept_with_what_it_was_read_from(cache):
    table = read_symbols(LIBRARY)
    assert symcache.trusted_origin(table)
    symcache.save(table)
    kept = symcache.load(table.build_id)
    assert (kept.names, kept.starts, kept.origin) == (table.names, table.starts, table.origin)


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user's needs root to make")
def test_a_table_of_another_users_file_is_not_kept(cache, tmp_path):
    theirs = tmp_path / "libc-copy.so"
    shutil.copy(LIBRARY, theirs)  # the same build-id, claimed by a file of nobody's
    os.chown(theirs, NOBODY, NOBODY)
    table = read_symbols(str(theirs))
    assert table.build_id == read_symbols(LIBRARY).build_id
    assert not symcache.trusted_origin(table)
    symcache.save(table)
    assert symcache.load(table.build_id) is None
    assert not cache.exists() or not any(cache.iterdir())


def test_a_group_writable_file_is_not_trusted():
    table = read_symbols(LIBRARY)
    uid, mode, *rest = table.origin
    assert not symcache.trusted_origin(dataclasses.replace(table, origin=(uid, mode | 0o020,
                                                                          *rest)))
    assert not symcache.trusted_origin(dataclasses.replace(table, origin=()))


def test_a_root_file_not_at_its_name_in_our_root_is_not_trusted():
    """Root's and read-only, but not the file its name names here (a container's
    image file, unpacked as root, is seen at its name only inside the container),
    or named through another process's root: not the node's, not shared."""
    table = read_symbols(LIBRARY)
    assert symcache.trusted_origin(table)
    elsewhere = "/usr/lib/x86_64-linux-gnu/libm.so.6"  # root's too, another inode
    assert not symcache.trusted_origin(dataclasses.replace(table, path=elsewhere))
    assert not symcache.trusted_origin(dataclasses.replace(table, path="/nonexistent" + LIBRARY))
    assert not symcache.trusted_origin(dataclasses.replace(table, path="/proc/1/root" + LIBRARY))
    assert not symcache.trusted_origin(dataclasses.replace(table, path="/proc/self/root" + LIBRARY))


def test_an_altered_or_older_entry_is_absent(cache):
    table = read_symbols(LIBRARY)
    symcache.save(table)
    entry = cache / table.build_id
    data = entry.read_bytes()
    at = data.index(b"\n") + 1 + 8 * len(table.starts) * 2 + 1  # inside the names
    entry.write_bytes(data[:at] + b"X" + data[at + 1:])
    assert symcache.load(table.build_id) is None
    entry.write_bytes(data.replace(b'"format": 3', b'"format": 2', 1))
    assert symcache.load(table.build_id) is None
    entry.unlink()
    entry.symlink_to("/etc/hostname")
    assert symcache.load(table.build_id) is None  # never followed


def test_a_cache_others_can_write_is_not_used(cache):
    cache.parent.mkdir(parents=True)
    cache.parent.chmod(0o777)
    table = read_symbols(LIBRARY)
    symcache.save(table)
    assert not cache.exists()
    assert symcache.load(table.build_id) is None
