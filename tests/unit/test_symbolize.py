"""Kernel names for runtime launches: demangling, shortening, maps, load bias."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cudaprobe.decode.callsites import CallSites
from cudaprobe.decode.demangle import demangle, shorten
from cudaprobe.decode.symbolize import KernelSymbolizer, Mapping, find_mapping, parse_maps
from cudaprobe.probe.event import CFG_WORDS, FRAME_STRUCT, FRAME_WORD, site_frame
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import libcudart_path

TORCH_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1>)")

MAPS = """\
55d4c0a00000-55d4c0a01000 r--p 00000000 fd:01 1234 /opt/app/bin/app
55d4c0a01000-55d4c0a05000 r-xp 00001000 fd:01 1234 /opt/app/bin/app
55d4c1000000-55d4c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 r-xp 00020000 fd:01 99 /usr/lib/libk.so (deleted)
7f1000000000-7f1000200000 r-xp 00010000 fd:01 77 /usr/lib/x86_64-linux-gnu/libkern.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
"""


@pytest.mark.parametrize("mangled,name", [
    ("_Z6vecAddPKfS0_Pfi", "vecAdd(float const*, float const*, float*, int)"),
    ("_Z5scaleIfEvPT_S0_i", "void scale<float>(float*, float, int)"),
    ("_ZN12_GLOBAL__N_16kernelEv", "(anonymous namespace)::kernel()"),
    ("vecAdd", "vecAdd"),  # extern "C": not mangled
    ("_Znot_valid", "_Znot_valid"),
])
def test_demangle(mangled, name):
    assert demangle(mangled) == name


@pytest.mark.parametrize("full,short", [
    ("vecAdd(float const*, float const*, float*, int)",
     "vecAdd(float const*, float const*, float*, int)"),  # fits: whole
    (TORCH_FILL, "at::native::vectorized_elementwise_kernel<…>"),
    ("void ns::long_kernel_name_that_is_long_enough<int>(float const*, float const*, int) const",
     "ns::long_kernel_name_that_is_long_enough<int>"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, 10>(float*, float const*, "
     "int, int, int)", "(anonymous namespace)::softmax_warp_forward<…>"),
])
def test_shorten(full, short):
    assert shorten(full) == short


def test_parse_maps_keeps_executable_files_only():
    maps = parse_maps(MAPS)
    assert maps == [
        Mapping(0x55D4C0A01000, 0x55D4C0A05000, 0x1000, "/opt/app/bin/app"),
        Mapping(0x7F1000000000, 0x7F1000200000, 0x10000, "/usr/lib/x86_64-linux-gnu/libkern.so"),
    ]
    assert find_mapping(maps, 0x55D4C0A04FFF).path == "/opt/app/bin/app"
    assert find_mapping(maps, 0x55D4C0A05000) is None
    assert find_mapping(maps, 0x7F1000000123).offset == 0x10000
    assert find_mapping(maps, 0x1000) is None


def test_resolves_a_shared_library_function_in_this_process():
    """libc is mapped with a load bias: the address must go through maps and PT_LOAD."""
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.qsort, ctypes.c_void_p).value
    sym = KernelSymbolizer()
    assert sym(os.getpid(), address) == "qsort"
    assert sym(os.getpid(), 0x10) is None


CXX_PROGRAM = r"""
#include <cstdio>
#include <unistd.h>
namespace k {
template <typename T> void scale(T *x, T a, int n) { for (int i = 0; i < n; i++) x[i] *= a; }
}
template void k::scale<float>(float *, float, int);
int main() {
    printf("%p\n", (void *)&k::scale<float>);
    fflush(stdout);
    char c; return read(0, &c, 1) < 0;
}
"""


@pytest.fixture(scope="module")
def cxx_programs(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    d = tmp_path_factory.mktemp("sym")
    src = d / "prog.cpp"
    src.write_text(CXX_PROGRAM)
    out = {}
    for flavour, flags in (("pie", ["-fPIE", "-pie"]), ("exec", ["-no-pie"])):
        exe = d / f"prog_{flavour}"
        subprocess.run(["g++", "-O0", *flags, "-o", str(exe), str(src)], check=True)
        out[flavour] = exe
    return out


@pytest.mark.parametrize("flavour", ["pie", "exec"])
def test_resolves_a_template_in_a_running_executable_after_it_exits(cxx_programs, flavour):
    proc = subprocess.Popen([str(cxx_programs[flavour])], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        address = int(proc.stdout.readline(), 16)
        sym = KernelSymbolizer()
        sym.see(proc.pid)  # first event: maps read while it runs
    finally:
        proc.communicate("x")
    assert proc.returncode == 0
    # decoded after the process exited: from the maps captured by see()
    assert sym(proc.pid, address) == "void k::scale<float>(float*, float, int)"
    assert sym(proc.pid, address + 1) == "void k::scale<float>(float*, float, int)"


def test_unknown_process_gives_no_name(tmp_path):
    sym = KernelSymbolizer(proc=str(tmp_path))
    sym.see(12345)
    assert sym(12345, 0x401000) is None


def test_maps_are_read_again_for_an_address_mapped_later(tmp_path):
    """A library dlopen'ed after the first event: the address is in no map seen then."""
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.qsort, ctypes.c_void_p).value
    (tmp_path / "7").mkdir()
    maps = tmp_path / "7" / "maps"
    maps.write_text("")
    sym = KernelSymbolizer(proc=str(tmp_path))
    sym.see(7)
    maps.write_text(Path("/proc/self/maps").read_text())
    assert sym(7, address) == "qsort"


def frame_in(path, function: str, into: int, caller: int) -> tuple[str, int, int]:
    """A launch frame as the probe records it: build-id, file offset and address
    of a call site `into` bytes into `function` of the object at `path`."""
    table = read_symbols(str(path))
    return table.build_id, table.functions[function] + into, caller


@pytest.fixture
def cudart(tmp_path, monkeypatch):
    path = libcudart_path()
    if path is None:
        pytest.skip("no libcudart")
    monkeypatch.setenv("CUDAPROBE_CACHE_DIR", str(tmp_path / "cache"))
    return path


def test_a_frame_names_a_stub_without_the_process(tmp_path, cudart):
    """No maps at all (the process is gone): the object is found by build-id among
    the candidates, the stub `func - caller` away from the recorded call site."""
    sym = KernelSymbolizer(proc=str(tmp_path))  # no /proc/PID here
    sym.add_candidates(["/bin/true", str(cudart)])
    caller = 0x7F00DEAD1040
    frame = frame_in(cudart, "cudaMalloc", 0x40, caller)
    stub = caller - 0x40  # cudaMalloc's first byte, where a host stub would be
    assert sym(4242, stub, frame) == "cudaMalloc"
    assert sym(4242, stub + 1, frame) is None  # inside a function: no stub there
    assert sym(4243, stub, ("00" * 20, 0x1000, caller)) is None  # an object unknown


def test_a_frame_is_named_from_the_cache_once_its_object_was_read(tmp_path, cudart):
    first = KernelSymbolizer(proc=str(tmp_path))
    first.add_candidates([str(cudart)])
    caller = 0x7F00DEAD1040
    frame = frame_in(cudart, "cudaFree", 0x10, caller)
    assert first(1, caller - 0x10, frame) == "cudaFree"
    later = KernelSymbolizer(proc=str(tmp_path))  # no candidates: the disk cache only
    assert later(1, caller - 0x10, frame) == "cudaFree"


def cfg_with_frame(status: int, build_id: bytes, offset: int, caller: int) -> tuple[int, ...]:
    data = FRAME_STRUCT.pack(status, build_id, offset, caller)
    words = struct.unpack(f"<{len(data) // 8}Q", data)
    return (0,) * FRAME_WORD + words + (0,) * (CFG_WORDS - FRAME_WORD - len(words))


def test_site_frame_is_taken_only_where_offset_and_address_agree():
    bid = bytes(range(20))
    assert site_frame(cfg_with_frame(1, bid, 0x12345, 0x7F0000012345)) == (
        bid.hex(), 0x12345, 0x7F0000012345)
    # a caller further up the stack (no push %rbp at the probed entry): another page offset
    assert site_frame(cfg_with_frame(1, bid, 0x12999, 0x7F0000012345)) is None
    assert site_frame(cfg_with_frame(2, bid, 0x12345, 0x7F0000012345)) is None  # only an IP
    assert site_frame(cfg_with_frame(0, bid, 0, 0)) is None  # not recorded


def test_call_site_and_callers_named_from_frames_without_maps(tmp_path, cudart):
    sites = CallSites.for_session([], [str(cudart)])
    sites.proc = str(tmp_path)  # the process is gone: no maps
    caller = 0x7F00DEAD1040
    site = frame_in(cudart, "cudaMalloc", 0x40, caller)
    outer = frame_in(cudart, "cudaFree", 0x10, 0)[:2]
    probed = frame_in(cudart, "cudaGetDevice", 0, 0)[:2]
    names = sites.site(7, caller, [probed, site[:2], outer], site)
    assert names == (f"cudaMalloc+0x40 ({cudart.name})", f"cudaFree+0x10 ({cudart.name})")
    # a later call from the same site carries no frame: named and deduplicated alike
    assert sites.site(7, caller, [probed, site[:2], outer]) == names
    assert sites.frame_name(7, ("ab" * 20, 0x99)) == "abababababab+0x99"  # object unknown


def test_a_frame_finds_an_object_whose_build_id_is_shorter_than_20_bytes(tmp_path, monkeypatch):
    """ld's --build-id=md5 makes a 16-byte id; the kernel pads the frame's to 20
    bytes with zeros: the object is still found, in the files and in the cache."""
    monkeypatch.setenv("CUDAPROBE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "k.c"
    source.write_text("int launch_stub(int x) { return x * 3 + 1; }\n")
    lib = tmp_path / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wl,--build-id=md5", "-o", str(lib),
                    str(source)], check=True)
    table = read_symbols(str(lib))
    assert len(table.build_id) == 32  # 16 bytes
    caller = 0x7F00CAFE0000
    frame = (table.build_id + "00" * 4, table.functions["launch_stub"], caller)
    first = KernelSymbolizer(proc=str(tmp_path))
    first.add_candidates([str(lib)])
    assert first(1, caller, frame) == "launch_stub"
    later = KernelSymbolizer(proc=str(tmp_path))  # no candidates: the disk cache only
    assert later(1, caller, frame) == "launch_stub"
    # a 20-byte id that is not the file's padded one finds nothing
    other = (table.build_id + "00" * 3 + "01", frame[1], caller)
    assert KernelSymbolizer(proc=str(tmp_path))(2, caller, other) is None


def test_a_name_replaced_after_the_process_exits_is_not_read(tmp_path, cxx_programs):
    """Names come from the file the process mapped: after it exits, its path is
    read only while it is still that device and inode, not another file put there."""
    exe = tmp_path / "prog"
    shutil.copy(cxx_programs["pie"], exe)
    renamed = tmp_path / "prog.cpp"
    renamed.write_text(CXX_PROGRAM.replace("scale", "evil_"))
    other = tmp_path / "other"
    subprocess.run(["g++", "-O0", "-fPIE", "-pie", "-o", str(other), str(renamed)], check=True)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = int(proc.stdout.readline(), 16)
        sym = KernelSymbolizer()
        sym.see(proc.pid)
    finally:
        proc.communicate("x")
    os.replace(other, exe)  # another file at the name the maps gave
    assert sym(proc.pid, address) is None
