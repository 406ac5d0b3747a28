"""Offsets of kernel struct fields, from the running kernel's BTF.

The Python stack probes read a few fields of the current task (its
executable's inode, where its code starts, its fs base), whose offsets
change with the kernel's version and configuration; bcc compiles against
whatever headers it finds (distribution fallbacks, often another version).
So the offsets are read here from /sys/kernel/btf/vmlinux and passed to the
program as -D settings (bpfprog.defines).
"""

from __future__ import annotations

import functools
import struct

BTF_PATH = "/sys/kernel/btf/vmlinux"
KIND_STRUCT, KIND_UNION = 4, 5
# kind -> bytes after struct btf_type: fixed, per vlen item
_EXTRA = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8), 14: (4, 0),
          15: (0, 12), 17: (4, 0), 19: (0, 12)}

# -D name -> the path of fields from a struct, its offset the sum of theirs
WANTED = {
    "CP_OFF_TASK_MM": ("task_struct", "mm"),
    "CP_OFF_TASK_FSBASE": ("task_struct", "thread", "fsbase"),
    "CP_OFF_TASK_PID": ("task_struct", "pid"),
    "CP_OFF_TASK_TGID": ("task_struct", "tgid"),
    "CP_OFF_TASK_FLAGS": ("task_struct", "flags"),
    "CP_OFF_REGS_ORIG_AX": ("pt_regs", "orig_ax"),
    "CP_OFF_MM_START_CODE": ("mm_struct", "start_code"),
    "CP_OFF_MM_EXE_FILE": ("mm_struct", "exe_file"),
    "CP_OFF_FILE_INODE": ("file", "f_inode"),
    "CP_OFF_INODE_INO": ("inode", "i_ino"),
    "CP_OFF_INODE_SB": ("inode", "i_sb"),
    "CP_OFF_SB_DEV": ("super_block", "s_dev"),
}

class Btf:
    def __init__(self, data: bytes) -> None:
        magic, _ver, _flags, hdr_len, type_off, type_len, str_off, _str_len = struct.unpack_from(
            "<HBBIIIII", data)
        if magic != 0xEB9F:
            raise ValueError("not BTF")
        types = data[hdr_len + type_off : hdr_len + type_off + type_len]
        self.strings = data[hdr_len + str_off :]
        self.types: list[tuple] = [(0, 0, 0, ())]  # id 0: void
        self.by_name: dict[str, int] = {}
        pos = 0
        while pos < len(types):
            name_off, info, size_type = struct.unpack_from("<III", types, pos)
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            pos += 12
            fixed, each = _EXTRA.get(kind, (0, 0))
            members: tuple = ()
            if kind in (KIND_STRUCT, KIND_UNION):
                members = tuple(struct.iter_unpack("<III", types[pos : pos + 12 * vlen]))
                if kflag:
                    members = tuple((n, t, off & 0xFFFFFF) for n, t, off in members)
            pos += fixed + each * vlen
            self.types.append((kind, name_off, size_type, members))
            if kind in (KIND_STRUCT, KIND_UNION) and name_off:
                self.by_name.setdefault(self.name(name_off), len(self.types) - 1)

    def name(self, off: int) -> str:
        return self.strings[off : self.strings.index(b"\0", off)].decode()

    def _resolve(self, tid: int) -> int:
        """Through typedefs and qualifiers to a struct or union."""
        while self.types[tid][0] in (8, 9, 10, 11, 18):  # typedef, volatile, const, restrict
            tid = self.types[tid][2]
        return tid

    def member_offset(self, tid: int, name: str) -> tuple[int, int] | None:
        """(byte offset, type id) of member `name`, looked for in anonymous members too."""
        for name_off, mtype, bits in self.types[tid][3]:
            if name_off and self.name(name_off) == name:
                return bits // 8, mtype
            if not name_off:
                inner = self._resolve(mtype)
                found = self.member_offset(inner, name) if self.types[inner][3] else None
                if found is not None:
                    return bits // 8 + found[0], found[1]
        return None

    def offset(self, path: tuple[str, ...]) -> int | None:
        tid = self.by_name.get(path[0])
        total = 0
        for field in path[1:]:
            if tid is None:
                return None
            found = self.member_offset(self._resolve(tid), field)
            if found is None:
                return None
            total += found[0]
            tid = found[1]
        return total


@functools.lru_cache(maxsize=1)
def task_offsets() -> dict[str, int] | None:
    """WANTED's offsets on this kernel; None where its BTF is not there or lacks one."""
    try:
        with open(BTF_PATH, "rb") as f:
            btf = Btf(f.read())
    except (OSError, ValueError, struct.error):
        return None
    out = {}
    for define, path in WANTED.items():
        off = btf.offset(path)
        if off is None:
            return None
        out[define] = off
    return out
