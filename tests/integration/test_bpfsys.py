"""bpfsys's own map calls, on a real map that bcc made and reads back."""

from __future__ import annotations

import pytest

from cudaprobe.probe import bpfsys

bcc = pytest.importorskip("bcc")


@pytest.fixture(scope="module")
def table():
    b = bcc.BPF(text="BPF_HASH(targets, u32, u8, 8);")
    yield b["targets"]
    b.cleanup()


def test_a_u32_keyed_element_is_read_and_replaced_only_where_it_is(table):
    fd = table.map_fd
    assert bpfsys.u32_key_lookup(fd, 4242, 1) is None
    assert bpfsys.u32_key_replace(fd, 4242, b"\x01") is False  # not added
    assert table.get(table.Key(4242)) is None
    table[table.Key(4242)] = table.Leaf(2)
    assert bpfsys.u32_key_lookup(fd, 4242, 1) == b"\x02"
    assert bpfsys.u32_key_replace(fd, 4242, b"\x01") is True
    assert table[table.Key(4242)].value == 1
    assert bpfsys.u32_key_lookup(fd, 4243, 1) is None


def test_a_bad_descriptor_is_an_error_not_a_missing_key():
    with pytest.raises(OSError):
        bpfsys.u32_key_lookup(2**31 - 1, 1, 1)
