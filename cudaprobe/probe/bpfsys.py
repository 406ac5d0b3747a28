"""Maps made, programs loaded and maps described through the raw bpf() syscall:
what loading a program kept in the cache (bpfcache.py) needs, without bcc's
compiler. uprobe_multi.py makes links the same way.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import struct
from dataclasses import dataclass

SYS_BPF = 321  # x86-64
BPF_MAP_CREATE = 0
BPF_PROG_LOAD = 5
BPF_OBJ_GET_INFO_BY_FD = 15
OBJ_NAME_LEN = 16  # BPF_OBJ_NAME_LEN, with its NUL
_ATTR_SIZE = 128
_MAP_INFO_SIZE = 88  # struct bpf_map_info up to map_extra
LOG_SIZE = 1 << 20  # the verifier's log, asked for only when a load fails

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    ret = _libc.syscall(SYS_BPF, cmd, attr, len(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


_held = ctypes.PyDLL(None, use_errno=True)  # the same, the GIL held through the call
_held.syscall.restype = ctypes.c_long
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_BTF_LOAD = 18
BPF_EXIST = 2


def _elem(cmd: int, fd: int, key: int, value: ctypes.Array | None, flags: int = 0) -> bool:
    """One element of a map with u32 keys, the GIL held: False where the key is
    not there (ENOENT). `value` None: nothing after the key (a delete)."""
    k = ctypes.c_uint32(key)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("<IIQQQ", attr, 0, fd, 0, ctypes.addressof(k),
                     0 if value is None else ctypes.addressof(value), flags)
    if _held.syscall(SYS_BPF, cmd, attr, _ATTR_SIZE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT:
        return False
    raise OSError(err, os.strerror(err))


def u32_key_lookup(fd: int, key: int, value_size: int) -> bytes | None:
    """The value at `key` in the map `fd` (u32 keys), or None."""
    value = ctypes.create_string_buffer(value_size)
    return value.raw if _elem(BPF_MAP_LOOKUP_ELEM, fd, key, value) else None


def u32_key_replace(fd: int, key: int, value: bytes) -> bool:
    """Set `key`'s value where the key is there (BPF_EXIST); False where not."""
    return _elem(BPF_MAP_UPDATE_ELEM, fd, key, ctypes.create_string_buffer(value, len(value)),
                 BPF_EXIST)


def u32_key_delete(fd: int, key: int) -> bool:
    """Take `key` out; False where it was not there."""
    return _elem(BPF_MAP_DELETE_ELEM, fd, key, None)


def u32_keys(fd: int) -> list[int]:
    """Every key of the map `fd` (u32 keys), as they are now."""
    keys: list[int] = []
    key, following = ctypes.c_uint32(0), ctypes.c_uint32(0)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    at = 0  # none: the first key
    while len(keys) < 1 << 20:
        struct.pack_into("<IIQQ", attr, 0, fd, 0, at, ctypes.addressof(following))
        if _held.syscall(SYS_BPF, BPF_MAP_GET_NEXT_KEY, attr, _ATTR_SIZE) != 0:
            break  # ENOENT: no more
        keys.append(following.value)
        key.value = following.value
        at = ctypes.addressof(key)
    return keys


def btf_load(blob: bytes) -> int:
    """Type information (BTF) for a program; returns its descriptor."""
    c_blob = ctypes.create_string_buffer(blob, len(blob))
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("<QQI", attr, 0, ctypes.addressof(c_blob), 0, len(blob))
    return _bpf(BPF_BTF_LOAD, attr)


def _name(name: bytes) -> bytes:
    """As the kernel keeps an object's name: at most 15 bytes, of [A-Za-z0-9_.]."""
    return bytes(c for c in name if chr(c).isalnum() or c in b"_.")[:OBJ_NAME_LEN - 1]


@dataclass(frozen=True)
class MapInfo:
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int


def map_info(fd: int) -> MapInfo:
    """What the kernel says of the map `fd`: its type, sizes and flags."""
    info = ctypes.create_string_buffer(_MAP_INFO_SIZE)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("<IIQ", attr, 0, fd, _MAP_INFO_SIZE, ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    kind, _id, key, value, entries, flags = struct.unpack_from("<6I", info, 0)
    return MapInfo(kind, key, value, entries, flags)


def map_create(name: bytes, info: MapInfo) -> int:
    """A new map of `info`'s kind; returns its descriptor. Where the kernel
    charges maps to RLIMIT_MEMLOCK (before Linux 5.11) and refuses one, the
    limit is lifted and the map made again, as bcc does."""
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    # union bpf_attr: map_type, key_size, value_size, max_entries, map_flags,
    # inner_map_fd, numa_node, map_name[16]
    struct.pack_into("<7I16s", attr, 0, info.type, info.key_size, info.value_size,
                     info.max_entries, info.flags, 0, 0, _name(name))
    try:
        return _bpf(BPF_MAP_CREATE, attr)
    except PermissionError:
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (OSError, ValueError):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM)) from None
        return _bpf(BPF_MAP_CREATE, attr)


def prog_load(prog_type: int, insns: bytes, license: bytes, kern_version: int, name: bytes,
              expected_attach_type: int = 0, log: bool = False,
              btf_fd: int = 0, func_info: tuple[tuple[int, int], ...] = ()) -> int:
    """Load `insns` as a program; returns its descriptor. OSError if the kernel
    refuses it; with `log`, its message ends with the verifier's last lines.
    `func_info`: (first instruction, BTF type id) of each function, with the
    BTF `btf_fd` (a program with callbacks needs them)."""
    c_insns = ctypes.create_string_buffer(insns, len(insns))
    c_license = ctypes.create_string_buffer(license)
    c_log = ctypes.create_string_buffer(LOG_SIZE if log else 1)
    c_info = (ctypes.c_uint32 * (2 * len(func_info) or 1))(*(v for f in func_info for v in f))
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    # prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
    # kern_version, prog_flags, prog_name[16], prog_ifindex, expected_attach_type,
    # prog_btf_fd, func_info_rec_size, func_info, func_info_cnt
    struct.pack_into("<IIQQIIQII16sIIIIQI", attr, 0, prog_type, len(insns) // 8,
                     ctypes.addressof(c_insns), ctypes.addressof(c_license), int(log),
                     LOG_SIZE if log else 0, ctypes.addressof(c_log) if log else 0,
                     kern_version, 0, _name(name), 0, expected_attach_type,
                     btf_fd, 8 if func_info else 0,
                     ctypes.addressof(c_info) if func_info else 0, len(func_info))
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as e:
        tail = c_log.value.decode(errors="replace").strip().splitlines()[-3:] if log else []
        if tail:  # the verifier's reason (its log may have been cut: ENOSPC)
            raise OSError(e.errno, " / ".join(tail)) from None
        raise
