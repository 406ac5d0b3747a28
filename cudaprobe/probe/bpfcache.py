"""Compiled BPF programs kept on disk: bcc compiles a program once per source,
settings and kernel, and a later session loads its instructions as they are.

bcc compiles the C with clang at every start (0.6 s of a 1.2 s `trace --
/bin/true`). What it makes is, per function, a run of instructions in which
each map is named by the descriptor bcc made it under (a 64-bit load of
source BPF_PSEUDO_MAP_FD, its immediate the descriptor). A `Program` keeps
those instructions with each such immediate set to 0, the places of them
(`relocations`: instruction, map), and each map as the kernel describes it
(kind, sizes, flags) with bcc's description of its key and value types; a
later session makes the maps again and writes their new descriptors in
(`relocate`). Any other reference to a descriptor, or a 64-bit load of a
kind not known here, and the program is not kept.

The key (`cache_key`) is a digest of everything the instructions depend on:
the program's C as compiled (bpf/ headers inlined), every -D setting, the
kernel (release, build, build-id or BTF digest, headers), bcc (its version
and library file) and cudaprobe's version and this format.

The cache is where the --gpu-time library is kept (targets/cachedir.py):
/var/cache/cudaprobe/bpf as root, used only where no one but root (or, not
root, us) can write any directory on the way. A program is loaded into the
kernel as root, so an entry is read only if it is a regular file of ours no
one else can write (never followed), names the key it is read for, and its
body has the digest its header gives; else it is absent, compiled again and
replaced (written to a new name, renamed into place).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from cudaprobe import __version__
from cudaprobe.targets.cachedir import cache_root, open_trusted, trusted_dir, write_new

FORMAT = 1
CACHE_VAR = "CUDAPROBE_CACHE"  # as the --gpu-time library's (targets/cupti.py)
SUBDIR = "bpf"
MAX_ENTRY = 64 << 20  # larger is not an entry of ours
BTF_PATH = "/sys/kernel/btf/vmlinux"

INSN = struct.Struct("<BBhi")  # code, dst|src<<4, off, imm
LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW: two instructions, the second holds the high word
PSEUDO_MAP_FD, PSEUDO_MAP_VALUE = 1, 2  # immediates that are map descriptors
PSEUDO_BTF_ID, PSEUDO_FUNC = 3, 4  # the kernel's BTF ids (in the key), a relative call


class NotRelocatable(ValueError):
    """Instructions that refer to something other than the program's own maps."""


@dataclass(frozen=True)
class Map:
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    key_desc: str  # bcc's JSON of the key's C type, for its ctypes mirror
    leaf_desc: str


@dataclass(frozen=True)
class Function:
    name: str
    insns: bytes  # map immediates 0
    relocations: tuple[tuple[int, int], ...]  # (instruction index, map index)


@dataclass(frozen=True)
class Program:
    license: str
    kern_version: int
    maps: tuple[Map, ...]
    functions: tuple[Function, ...]


def relocatable(insns: bytes, map_fds: dict[int, int]) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """`insns` with each map descriptor (`map_fds`: descriptor -> map index)
    set to 0, and where they were. NotRelocatable for any other reference."""
    if len(insns) % INSN.size:
        raise NotRelocatable(f"{len(insns)} bytes is not a whole number of instructions")
    out, relocations = bytearray(insns), []
    i, n = 0, len(insns) // INSN.size
    while i < n:
        code, regs, off, imm = INSN.unpack_from(insns, i * INSN.size)
        if code != LD_IMM64:
            i += 1
            continue
        if i + 1 >= n:
            raise NotRelocatable(f"a 64-bit load cut short at instruction {i}")
        src = regs >> 4
        if src in (PSEUDO_MAP_FD, PSEUDO_MAP_VALUE):
            if imm not in map_fds:
                raise NotRelocatable(f"instruction {i} names descriptor {imm}, not a map of "
                                     "the program")
            relocations.append((i, map_fds[imm]))
            INSN.pack_into(out, i * INSN.size, code, regs, off, 0)
        elif src not in (0, PSEUDO_BTF_ID, PSEUDO_FUNC):
            raise NotRelocatable(f"instruction {i}: a 64-bit load of kind {src}")
        i += 2
    return bytes(out), tuple(relocations)


def relocate(function: Function, map_fds: list[int]) -> bytes:
    """`function`'s instructions with its maps' descriptors (`map_fds`, by map
    index) written in; NotRelocatable if its relocations are not those of its
    instructions (an entry not made by relocatable())."""
    insns = function.insns
    if len(insns) % INSN.size:
        raise NotRelocatable(f"{function.name}: not a whole number of instructions")
    out = bytearray(insns)
    wanted = {}
    for index, map_index in function.relocations:
        if not 0 <= map_index < len(map_fds):
            raise NotRelocatable(f"{function.name}: map {map_index} of {len(map_fds)}")
        wanted[index] = map_fds[map_index]
    i, n = 0, len(insns) // INSN.size
    while i < n:
        code, regs, off, imm = INSN.unpack_from(insns, i * INSN.size)
        if code == LD_IMM64:
            if regs >> 4 in (PSEUDO_MAP_FD, PSEUDO_MAP_VALUE):
                if i not in wanted or imm != 0:
                    raise NotRelocatable(f"{function.name}: instruction {i} names a map "
                                         "the entry does not relocate")
                INSN.pack_into(out, i * INSN.size, code, regs, off, wanted.pop(i))
            i += 2
            continue
        i += 1
    if wanted:
        raise NotRelocatable(f"{function.name}: relocations at {sorted(wanted)} are not map "
                             "loads")
    return bytes(out)


# ---- the key


def _read(path: str, limit: int = 1 << 16) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def _stat_identity(path: str) -> str:
    """A file's identity as its name resolves now: path, size, mtime, inode."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return f"{path}: absent"
    return f"{real} {st.st_size} {st.st_mtime_ns} {st.st_dev}:{st.st_ino}"


def build_id(notes: bytes) -> str:
    """The GNU build-id in ELF notes (the kernel's: /sys/kernel/notes), in hex;
    "" if there is none."""
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, pos)
        name_end = pos + 12 + (namesz + 3 & ~3)
        desc = notes[name_end : name_end + descsz]
        if len(desc) < descsz:
            break  # cut short
        if kind == 3 and notes[pos + 12 : pos + 12 + namesz].rstrip(b"\0") == b"GNU":
            return desc.hex()
        pos = name_end + (descsz + 3 & ~3)
    return ""


@functools.cache
def kernel_identity() -> str:
    """What the program's instructions depend on in the kernel: its release and
    build (uname), its build-id (or, without one, a digest of its BTF: struct
    offsets and BTF ids come from it) and BTF's size, and the headers bcc
    compiles against."""
    u = os.uname()
    identity = build_id(_read("/sys/kernel/notes"))
    if not identity:
        identity = "btf:" + hashlib.sha256(_read(BTF_PATH, 1 << 30)).hexdigest()
    btf_size = os.stat(BTF_PATH).st_size if os.path.exists(BTF_PATH) else 0
    headers = _stat_identity(f"/lib/modules/{u.release}/build")
    return "\n".join((u.release, u.version, u.machine, identity, f"btf {btf_size}", headers))


def bcc_identity(bcc_module: object) -> str:
    """bcc's version and the libbcc it compiles with (the file, as mapped)."""
    version = str(getattr(bcc_module, "__version__", "?"))
    lib = ""
    for line in _read("/proc/self/maps", 1 << 22).decode(errors="replace").splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith("libbcc.so"):
            lib = _stat_identity(fields[5])
            break
    return f"{version}\n{lib}"


def cache_key(text: bytes, cflags: list[str], bcc_identity_text: str) -> str:
    """The digest of everything the compiled instructions depend on."""
    digest = hashlib.sha256()
    for part in (f"cudaprobe-bpf {FORMAT}", __version__, bcc_identity_text, kernel_identity(),
                 "\0".join(cflags)):
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little") + data)
    digest.update(len(text).to_bytes(8, "little") + text)
    return digest.hexdigest()


# ---- the entry: a header line (format, key, digest of the body), then the body:
# a JSON line (license, maps, functions with their relocations), then the
# instructions of each function, one after another


def pack(key: str, program: Program) -> bytes:
    meta = {"license": program.license, "kern_version": program.kern_version,
            "maps": [m.__dict__ for m in program.maps],
            "functions": [{"name": f.name, "size": len(f.insns),
                           "relocations": [list(r) for r in f.relocations]}
                          for f in program.functions]}
    body = json.dumps(meta, separators=(",", ":")).encode() + b"\n" + b"".join(
        f.insns for f in program.functions)
    header = {"format": FORMAT, "key": key, "size": len(body),
              "digest": hashlib.sha256(body).hexdigest()}
    return json.dumps(header).encode() + b"\n" + body


def unpack(key: str, data: bytes) -> Program | None:
    """The program of an entry read for `key`; None if it is not whole, not of
    this format, or another key's."""
    try:
        end = data.index(b"\n")
        header = json.loads(data[:end])
        body = data[end + 1 :]
        if (header.get("format") != FORMAT or header.get("key") != key
                or header.get("size") != len(body)
                or hashlib.sha256(body).hexdigest() != header.get("digest")):
            return None
        end = body.index(b"\n")
        meta = json.loads(body[:end])
        blob, pos, functions = body[end + 1 :], 0, []
        for f in meta["functions"]:
            size = int(f["size"])
            functions.append(Function(str(f["name"]), blob[pos : pos + size],
                                      tuple((int(i), int(m)) for i, m in f["relocations"])))
            pos += size
        if pos != len(blob):
            return None
        maps = tuple(Map(**m) for m in meta["maps"])
        return Program(str(meta["license"]), int(meta["kern_version"]), maps, tuple(functions))
    except (ValueError, KeyError, TypeError):
        return None


def _directory() -> Path | None:
    directory, _why = trusted_dir(cache_root(CACHE_VAR) / SUBDIR)
    return directory


def entry_name(key: str) -> str:
    return f"{key[:32]}.bpf"


def load(key: str) -> Program | None:
    """The program kept under `key`, checked; None if there is none, the cache
    is not ours alone, or the entry is not whole (it is then compiled again)."""
    directory = _directory()
    if directory is None:
        return None
    fd, _why = open_trusted(directory / entry_name(key))
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_ENTRY + 1)
    except OSError:
        return None
    return unpack(key, data) if len(data) <= MAX_ENTRY else None


def store(key: str, program: Program) -> Path | None:
    """Keep `program` under `key`; quietly not where the cache cannot be
    written or is not ours alone. Returns where it was kept."""
    directory = _directory()
    if directory is None:
        return None
    data = pack(key, program)
    try:
        write_new(directory, entry_name(key), lambda fd, _tmp: _write_all(fd, data))
    except OSError:
        return None
    return directory / entry_name(key)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
