"""The per-version layouts (targets/pyoffsets.py) against each CPython's own
headers: an offsetof program (pyoffsets_probe.c) compiled with Py_BUILD_CORE
against every CPython on the machine whose headers are installed; 3.13's
`_Py_DebugOffsets`, read from its libpython's data, against its headers too."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from cudaprobe.targets import pyelf, pyoffsets

PROBE = Path(__file__).resolve().parent / "pyoffsets_probe.c"
FIELDS = [f.name for f in fields(pyoffsets.Layout)
          if f.name not in ("thread_id_is_pthread", "instr_is_pointer")]


def pythons() -> list[str]:
    found = glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))
    found += glob.glob("/usr/bin/python3.*")
    return sorted(p for p in found if p.rsplit("python", 1)[1] in
                  ("3.9", "3.10", "3.11", "3.12", "3.13"))


def include_dir(python: str) -> str | None:
    version = python.rsplit("python", 1)[1]
    prefix = os.path.dirname(os.path.dirname(python))
    for d in (f"{prefix}/include/python{version}", f"/usr/include/python{version}"):
        if os.path.isfile(f"{d}/internal/pycore_runtime.h"):
            return d
    return None


def header_offsets(tmp_path: Path, include: str) -> dict[str, int]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "probe"
    subprocess.run([cc, f"-I{include}", f"-I{include}/internal", "-o", str(exe), str(PROBE)],
                   check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split("=") for line in out.split())}


@pytest.mark.parametrize("python", pythons())
def test_layout_matches_headers(tmp_path, python):
    include = include_dir(python)
    if include is None:
        pytest.skip(f"no headers (internal/ included) for {python}")
    image = pyelf.read_image(python)
    assert image is not None, python
    found = pyelf.exe_entry(image)
    assert found is not None, f"{python}: the probes would not find its runtime"
    holder = found[0]
    assert holder.layout is not None and holder.version is not None
    want = header_offsets(tmp_path, include)
    got = {name: getattr(holder.layout, name) for name in FIELDS}
    assert got == {name: want[name] for name in FIELDS}, (holder.path, holder.version)
    assert holder.layout.thread_id_is_pthread == (holder.version < (3, 11))
    assert holder.layout.instr_is_pointer == (holder.version >= (3, 11))
    if holder.version >= (3, 13):  # read from _Py_DebugOffsets, not from the table
        assert holder.version not in pyoffsets.LAYOUTS


def test_debug_offsets_of_another_version_are_not_taken():
    data = bytearray(pyoffsets.DEBUG_SIZE)
    data[:8] = pyoffsets.DEBUG_COOKIE
    data[8:16] = (0x030E00F0).to_bytes(8, "little")  # 3.14: another layout of the struct
    assert pyoffsets.from_debug_offsets(bytes(data)) is None
    assert pyoffsets.from_debug_offsets(b"notdebug" + bytes(pyoffsets.DEBUG_SIZE)) is None
