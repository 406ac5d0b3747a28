"""A bcc.BPF made from a program kept in the cache (bpfcache.py), and what is
kept taken from one bcc compiled.

`CachedBPF` is a bcc.BPF whose maps and programs come from the kept
instructions: the maps are made again, their descriptors written into the
instructions, and each function loaded (`load_func`) when it is first asked
for, as bcc does. Everything else is bcc's own: tables by name (`bpf["x"]`,
the Key and Leaf ctypes from bcc's descriptions of the types), the tracepoint
programs attached at load, perf uprobes, cleanup(). bcc's tables ask libbcc
for their kind, flags and size from the compiled module; there is none, so
they are given them from the kept maps. Imported only once bcc is (load.py).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import functools
import json
import os
from typing import Any

import bcc
from bcc import table as bcc_table

from cudaprobe.probe import bpfcache, bpfsys

# bcc's table class for each map kind a kept program may have
TABLES = {
    bcc_table.BPF_MAP_TYPE_HASH: bcc_table.HashTable,
    bcc_table.BPF_MAP_TYPE_ARRAY: bcc_table.Array,
    bcc_table.BPF_MAP_TYPE_PERCPU_HASH: bcc_table.PerCpuHash,
    bcc_table.BPF_MAP_TYPE_PERCPU_ARRAY: bcc_table.PerCpuArray,
    bcc_table.BPF_MAP_TYPE_STACK_TRACE: bcc_table.StackTrace,
    bcc_table.BPF_MAP_TYPE_LRU_HASH: bcc_table.LruHash,
    bcc_table.BPF_MAP_TYPE_LRU_PERCPU_HASH: bcc_table.LruPerCpuHash,
    bcc_table.BPF_MAP_TYPE_RINGBUF: bcc_table.RingBuf,
}
# functions bcc attaches at load by a BTF id (not kept: a kept program is loaded
# without BTF); those it attaches by name (kprobe__, tracepoint__, ...) are kept
NEEDS_BTF = (b"kfunc__", b"kretfunc__", b"lsm__")


@functools.cache
def _libbcc() -> ctypes.CDLL:
    """libbcc's module accessors by table index, through our own handle (bcc's
    Python binding declares only the by-name ones)."""
    lib = ctypes.CDLL("libbcc.so.0", use_errno=True)
    for name, restype in (("bpf_num_tables", ctypes.c_ulonglong),
                          ("bpf_table_name", ctypes.c_char_p),
                          ("bpf_table_fd_id", ctypes.c_int),
                          ("bpf_table_key_desc_id", ctypes.c_char_p),
                          ("bpf_table_leaf_desc_id", ctypes.c_char_p)):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = [ctypes.c_void_p] + ([ctypes.c_ulonglong] if name != "bpf_num_tables"
                                          else [])
    return lib


def extract(bpf: Any) -> bpfcache.Program:
    """What to keep of a program bcc compiled: its maps as the kernel made them
    and each function's instructions, relocatable. NotRelocatable (a ValueError)
    where it cannot be kept."""
    lib, mod = _libbcc(), bpf.module
    maps, fds = [], {}
    for i in range(lib.bpf_num_tables(mod)):
        fd = lib.bpf_table_fd_id(mod, i)
        if fd < 0:
            raise bpfcache.NotRelocatable(f"table {i} has no map")
        info = bpfsys.map_info(fd)
        if info.type not in TABLES:
            raise bpfcache.NotRelocatable(f"table {i}: a map of kind {info.type}")
        fds[fd] = i
        maps.append(bpfcache.Map(
            lib.bpf_table_name(mod, i).decode(), info.type, info.key_size, info.value_size,
            info.max_entries, info.flags, (lib.bpf_table_key_desc_id(mod, i) or b"").decode(),
            (lib.bpf_table_leaf_desc_id(mod, i) or b"").decode()))
    functions = []
    for i in range(bcc.lib.bpf_num_functions(mod)):
        name = bcc.lib.bpf_function_name(mod, i)
        if name.startswith(NEEDS_BTF):
            raise bpfcache.NotRelocatable(f"{name.decode()} is attached by BTF id")
        insns, relocations = bpfcache.relocatable(bpf.dump_func(name), fds)
        functions.append(bpfcache.Function(name.decode(), insns, relocations))
    return bpfcache.Program(bcc.lib.bpf_module_license(mod).decode(),
                            bcc.lib.bpf_module_kern_version(mod), tuple(maps), tuple(functions))


class CachedBPF(bcc.BPF):
    """A bcc.BPF loaded from kept instructions, not compiled: its maps made,
    its autoloaded programs (tracepoints) attached, as bcc.BPF(text=...) would."""

    from_cache = True

    def __init__(self, program: bpfcache.Program) -> None:  # noqa: PLW0231 - nothing to compile
        # the state bcc.BPF.__init__ sets up, but for the module
        self.kprobe_fds, self.uprobe_fds, self.tracepoint_fds = {}, {}, {}
        self.raw_tracepoint_fds, self.kfunc_entry_fds, self.kfunc_exit_fds = {}, {}, {}
        self.lsm_fds, self.perf_buffers, self.open_perf_events = {}, {}, {}
        self._ringbuf_manager = None
        self.tracefile = None
        self.debug = 0
        self.funcs: dict[bytes, Any] = {}
        self.tables: dict[bytes, Any] = {}
        self.module = None
        self._program = program
        self._functions = {f.name.encode(): f for f in program.functions}
        self._maps = {m.name.encode(): i for i, m in enumerate(program.maps)}
        self._map_fds: list[int] = []
        atexit.register(self.cleanup)
        try:
            for m in program.maps:
                self._map_fds.append(bpfsys.map_create(m.name.encode(), bpfsys.MapInfo(
                    m.type, m.key_size, m.value_size, m.max_entries, m.flags)))
            self._trace_autoload()
        except BaseException:
            self.cleanup()
            raise

    def _trace_autoload(self) -> None:
        for f in self._program.functions:
            name = f.name.encode()
            if name.startswith(b"tracepoint__"):
                tp = name[len(b"tracepoint__"):].replace(b"__", b":")
                self.attach_tracepoint(tp=tp, fn_name=name)
            elif name.startswith(b"raw_tracepoint__"):
                self.attach_raw_tracepoint(tp=name[len(b"raw_tracepoint__"):], fn_name=name)
            elif name.startswith(b"kprobe__"):
                self.attach_kprobe(event=self.fix_syscall_fnname(name[8:]), fn_name=name)
            elif name.startswith(b"kretprobe__"):
                self.attach_kretprobe(event=self.fix_syscall_fnname(name[11:]), fn_name=name)

    def load_func(self, func_name: bytes | str, prog_type: int, device: Any = None,
                  attach_type: int = -1) -> Any:
        name = func_name.encode() if isinstance(func_name, str) else func_name
        if name in self.funcs:
            return self.funcs[name]
        function = self._functions.get(name)
        if function is None:
            raise Exception(f"Unknown program {name.decode()}")
        insns = bpfcache.relocate(function, self._map_fds)
        load = functools.partial(bpfsys.prog_load, prog_type, insns,
                                 self._program.license.encode(), self._program.kern_version,
                                 name, max(attach_type, 0))
        try:
            fd = load()
        except OSError as e:  # said as bcc says it (load.retry_interrupted reads the text)
            detail = e.strerror
            if e.errno != errno.EAGAIN:
                detail = verifier_reason(load) or detail
            raise Exception(f"Failed to load BPF program {name.decode()}: {detail}") from None
        fn = bcc.BPF.Function(self, name, fd)
        self.funcs[name] = fn
        return fn

    def dump_func(self, func_name: bytes | str) -> bytes:
        name = func_name.encode() if isinstance(func_name, str) else func_name
        if name not in self._functions:
            raise Exception(f"Unknown program {name.decode()}")
        return bpfcache.relocate(self._functions[name], self._map_fds)

    def get_table(self, name: bytes | str, keytype: Any = None, leaftype: Any = None,
                  reducer: Any = None) -> Any:
        name = name.encode() if isinstance(name, str) else name
        if name not in self._maps:
            raise KeyError(name)
        index = self._maps[name]
        m = self._program.maps[index]
        keytype = keytype or bcc.BPF._decode_table_type(json.loads(m.key_desc))
        leaftype = leaftype or bcc.BPF._decode_table_type(json.loads(m.leaf_desc))
        cls = TABLES[m.type]
        extra = {"reducer": reducer} if cls in (bcc_table.PerCpuHash,
                                                bcc_table.PerCpuArray) else {}
        if cls is bcc_table.RingBuf:
            extra = {"name": name}
        t = cls(self, index, self._map_fds[index], keytype, leaftype, **extra)
        # what bcc's TableBase asked libbcc for, and got nothing (no module)
        t.ttype, t.flags, t.max_entries = m.type, m.flags, m.max_entries
        return t

    def close(self) -> None:
        super().close()
        fds, self._map_fds = self._map_fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def verifier_reason(load: Any) -> str:
    """Why the kernel refused a program, from a second load with the verifier's
    log; "" if that one loaded."""
    try:
        os.close(load(log=True))
    except OSError as e:
        return e.strerror or ""
    return ""
