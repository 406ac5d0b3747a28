"""The struct-based ELF symbol reader against pyelftools, on real libraries; the
build-id cache of symbol tables."""

from __future__ import annotations

import random

import pytest
from elftools.elf.elffile import ELFFile

from cudaprobe.targets import symcache
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import libcuda_path, libcudart_path

LIBRARIES = [p for p in (libcudart_path(), libcuda_path()) if p is not None]


def pyelftools_functions(path) -> tuple[dict[str, int], dict[int, tuple[int, str]]]:
    """name -> link-time address, and address -> (size, name) of the first symbol
    there, as the pyelftools reader this replaces made them."""
    vaddrs: dict[str, int] = {}
    spans: dict[int, tuple[int, str]] = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for section_name in (".dynsym", ".symtab"):
            section = elf.get_section_by_name(section_name)
            for sym in section.iter_symbols() if section is not None else ():
                if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC"):
                    continue
                if sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"]:
                    continue
                name = sym.name.split("@", 1)[0]
                spans.setdefault(sym["st_value"], (sym["st_size"], name))
                vaddrs.setdefault(name, sym["st_value"])
    return vaddrs, spans


@pytest.mark.parametrize("path", LIBRARIES, ids=lambda p: p.name)
def test_reader_agrees_with_pyelftools(path):
    table = read_symbols(str(path))
    vaddrs, spans = pyelftools_functions(path)
    assert len(vaddrs) > 100
    assert table.vaddrs == vaddrs
    assert table.starts == sorted(spans)
    assert [(s, n) for s, n in zip(table.sizes, table.names)] == [spans[a] for a in table.starts]
    for start in random.Random(0).sample(table.starts, 200):
        size, name = spans[start]
        assert table.function_at(start + max(size, 1) - 1) == (name, start)
    assert len(table.build_id) == 40  # a GNU build-id (SHA-1)


@pytest.mark.parametrize("path", LIBRARIES[:1], ids=lambda p: p.name)
def test_cache_by_build_id_round_trips(tmp_path, monkeypatch, path):
    monkeypatch.setenv("CUDAPROBE_CACHE_DIR", str(tmp_path))
    table = read_symbols(str(path))
    assert symcache.load(table.build_id) is None
    symcache.save(table)
    kept = symcache.load(table.build_id)
    assert (kept.starts, kept.sizes, kept.names) == (table.starts, table.sizes, table.names)
    assert (kept.loads, kept.path, kept.build_id) == (table.loads, str(path), table.build_id)
    assert kept.vaddr_of(0x2000) == table.vaddr_of(0x2000)


def test_cache_refuses_odd_build_ids_and_torn_files(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPROBE_CACHE_DIR", str(tmp_path))
    assert symcache.load("../../etc/passwd") is None
    (tmp_path / "symbols").mkdir()
    (tmp_path / "symbols" / "ab12").write_bytes(b'{"format": 1, "count": 3}\n\0\0')
    assert symcache.load("ab12") is None
