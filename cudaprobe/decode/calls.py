"""Decode raw events into calls: pure Python, no root, no bcc."""

from __future__ import annotations

import math
import struct
from typing import Any, Callable

from cudaprobe.catalogue.enums import enum_name, error_name
from cudaprobe.catalogue.functions import (
    MEMCPY_KINDS,
    NOT_CAPTURED_SLOT,
    OUT_KINDS,
    Arg,
    ArgKind,
    Function,
)
from cudaprobe.catalogue.structs import LAYOUTS
from cudaprobe.decode.demangle import demangle, shorten
from cudaprobe.decode.handles import NAME_KEY, UNKNOWN_WHY, KernelHandles
from cudaprobe.decode.nccl import describe
from cudaprobe.decode.schema import JSONL_KEYS, time_ms
from cudaprobe.probe.event import NAME_MAX, RawEvent, site_frame
from cudaprobe.probe.plan import Probe

# (pid, address[, frame]) -> name, or None when unknown; supplied by the kernel-name
# resolver. `frame` (event.site_frame): where the probe found the launch's call
# site, which names the object even after the process has exited.
Symbolizer = Callable[..., "str | None"]


class Call:
    """One traced call, with the keys of the JSONL schema as attributes.

    `args` and `details` may be decoded on first use: the trace hot path
    (records.py) makes calls with a `lazy` (decoder, record) pair, since
    most reporters need one or neither of them. Either can be assigned."""

    __slots__ = ("time_ms", "ts_ns", "pid", "tid", "process", "event", "api", "category",
                 "duration_ns", "ret", "ret_name", "_args", "_details", "lazy", "gpu", "depth",
                 "parent", "py_stack", "rank", "world_size")

    def __init__(self, time_ms: float, ts_ns: int, pid: int, tid: int, process: str, event: str,
                 api: str, category: str, duration_ns: int | None, ret: int | None,
                 ret_name: str | None, args: dict[str, Any] | None = None,
                 details: str | None = None, lazy: Any = None, depth: int = 0,
                 parent: int | None = None) -> None:
        self.time_ms = time_ms
        self.ts_ns = ts_ns
        self.pid = pid
        self.tid = tid
        self.process = process
        self.event = event
        self.api = api
        self.category = category
        self.duration_ns = duration_ns
        self.ret = ret
        self.ret_name = ret_name
        self._args = args
        self._details = details
        # (decoder, record): decoder.args_details(record) -> (args, details)
        self.lazy = lazy
        # --gpu-time: the kernels, copies or memsets it queued (decode.gputime.GpuWork)
        self.gpu: list | None = None
        # nesting on its thread (nesting.CallOrder): 0 at the top; the ts_ns of the
        # call this one was made in
        self.depth = depth
        self.parent = parent
        # --py-stacks: the thread's Python stack at the call (decode.pystacks.PyStack)
        self.py_stack: Any = None
        # the process's rank in its job and the job's size, where known (decode/ranks.py)
        self.rank: int | None = None
        self.world_size: int | None = None

    @property
    def as_recorded(self) -> tuple[Any, tuple] | None:
        """(decoder, record) of a call whose row its record alone makes, as the
        formats' row makers write it: not decoded, nothing assigned, ended;
        None for any other."""
        lazy = self.lazy
        if (lazy is None or self._args is not None or self._details is not None
                or self.duration_ns is None or self.event is not lazy[0].event):
            return None
        return lazy

    def _decode(self) -> None:
        decoder, record = self.lazy
        args, details = decoder.args_details(record)
        if self._args is None:
            self._args = args
        if self._details is None:
            self._details = details

    @property
    def args(self) -> dict[str, Any]:
        if self._args is None:
            self._decode()
        return self._args

    @args.setter
    def args(self, value: dict[str, Any]) -> None:
        self._args = value

    @property
    def details(self) -> str:
        if self._details is None:
            self._decode()
        return self._details

    @details.setter
    def details(self, value: str) -> None:
        self._details = value

    @property
    def in_flight(self) -> bool:
        return self.duration_ns is None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in JSONL_KEYS}
        if self.rank is not None:  # absent for a process that is no known rank
            d["rank"], d["world_size"] = self.rank, self.world_size
        if self.py_stack is not None:  # absent for a thread with no Python frame
            d.update(self.py_stack.fields())
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Call) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __repr__(self) -> str:
        return "Call(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


def humanize_bytes(n: int) -> str:
    """`1.5 KiB`: how a size is written in a call's details, and so in every view
    (output's tables use this one spelling too)."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _hex(v: int) -> str:
    return f"{v:#x}"


def _f32(v: int) -> float:
    return round(struct.unpack("<f", struct.pack("<I", v & 0xFFFFFFFF))[0], 6)


def _dim3(lo: int, hi: int) -> list[int]:
    return [lo & 0xFFFFFFFF, lo >> 32, hi & 0xFFFFFFFF]


def _dim3_text(d: list[int]) -> str:
    return f"({d[0]},{d[1]},{d[2]})"


def _hex_value(v: int) -> tuple[str, str]:
    h = f"{v:#x}"
    return h, h


def _size_value(v: int) -> tuple[int, str]:
    return v, humanize_bytes(v)


def _unsigned(mask: int) -> Callable[[int], tuple[int, str]]:
    def value(v: int) -> tuple[int, str]:
        v &= mask
        return v, str(v)
    return value


def _int_value(v: int) -> tuple[int, str]:
    v = _s32(v)
    return v, str(v)


def _flags_value(v: int) -> tuple[int, str]:
    v &= 0xFFFFFFFF
    return v, _hex(v)


def _memcpy_kind_value(v: int) -> tuple[str, str]:
    name = MEMCPY_KINDS.get(v & 0xFFFFFFFF, str(_s32(v)))
    return name, name


def _float_value(v: int) -> tuple[float | None, str]:
    f = _f32(v)  # NaN/inf (which no call should write) is no JSON number: null
    return (f if math.isfinite(f) else None), f"{f:g}"


# kind -> (JSON value, DETAILS text) of the one word it reads: the argument word,
# or for OUT_* kinds the value read at exit. DIM3 reads two words (_decode_arg).
WORD_DECODERS: dict[ArgKind, Callable[[int], tuple[Any, str]]] = {
    **dict.fromkeys((ArgKind.PTR, ArgKind.STREAM, ArgKind.EVENT, ArgKind.HANDLE, ArgKind.FUNC,
                     ArgKind.CU_FUNCTION, ArgKind.OUT_PTR, ArgKind.OUT_HANDLE,
                     ArgKind.OUT_FUNCTION), _hex_value),
    ArgKind.SIZE: _size_value,
    ArgKind.OUT_SIZE: _size_value,
    ArgKind.OUT_U64: _unsigned(0xFFFFFFFFFFFFFFFF),
    ArgKind.SIZE32: lambda v: _size_value(v & 0xFFFFFFFF),
    ArgKind.COUNT: _unsigned(0xFFFFFFFFFFFFFFFF),
    ArgKind.UINT: _unsigned(0xFFFFFFFF),
    ArgKind.UINT16: _unsigned(0xFFFF),
    ArgKind.UINT8: _unsigned(0xFF),
    ArgKind.INT: _int_value,
    ArgKind.OUT_INT: _int_value,
    ArgKind.FLAGS: _flags_value,
    ArgKind.MEMCPY_KIND: _memcpy_kind_value,
    ArgKind.OUT_FLOAT: _float_value,
}


def _dim3_value(lo: int, hi: int) -> tuple[list[int], str]:
    d = _dim3(lo, hi)
    return d, _dim3_text(d)


# (JSON value, DETAILS text) of an out-parameter that was not read: the call
# failed (CUDA leaves it unspecified; strace leaves a failed syscall's out-
# parameters undecoded too), or was still running when the trace ended
NOT_READ: tuple[None, str] = (None, "-")


def _decode_arg(
    kind: ArgKind, words: tuple[int, ...], slot: int, outs: tuple[int, ...], out: int | None
) -> tuple[Any, str]:
    """Return (JSON value, DETAILS text) for one argument; `out`: its index in
    `outs` for an out-parameter, which is NOT_READ where `outs` is shorter."""
    if kind is ArgKind.DIM3:
        return _dim3_value(words[slot], words[slot + 1])
    decode = WORD_DECODERS.get(kind)
    if decode is None:
        raise ValueError(f"no decoder for {kind}")
    if kind in OUT_KINDS:
        assert out is not None, kind
        return decode(outs[out]) if out < len(outs) else NOT_READ
    return decode(words[slot])


# (JSON value, DETAILS text) of an argument not captured: a float in an SSE
# register, a struct passed on the stack, or one past the slots (model.py)
NOT_CAPTURED: tuple[None, str] = (None, "?")


def _enum_value(enum: str, v: int) -> tuple[Any, str]:
    """An enum by value: its enumerator's name, or the number where it has none."""
    v = _s32(v)
    name = enum_name(enum, v)
    return (name, name) if name is not None else (v, str(v))


def _byval_value(words: tuple[int, ...]) -> tuple[Any, str]:
    """A small struct passed in registers: its words, in hex."""
    if len(words) == 1:
        return _hex_value(words[0])
    texts = [_hex(w) for w in words]
    return texts, "{" + ",".join(texts) + "}"


def _field_value(kind: str, data: bytes, at: int) -> tuple[Any, str]:
    if kind == "dim3":
        d = list(struct.unpack_from("<3I", data, at))
        return d, _dim3_text(d)
    width = {"u8": 1, "u16": 2, "u32": 4, "s32": 4}.get(kind, 8)
    v = int.from_bytes(data[at:at + width], "little", signed=kind == "s32")
    if kind.startswith("enum:"):
        return _enum_value(kind[len("enum:"):], v)
    if kind == "ptr":
        return _hex_value(v)
    if kind == "size":
        return _size_value(v)
    return v, str(v)


def _struct_value(arg: Arg, address: int, cfg: tuple[int, ...]) -> tuple[dict[str, Any], str]:
    """A `const struct *` whose window of bytes was copied at entry (structs.py)."""
    layout = LAYOUTS[arg.type_name]
    data = b"".join(w.to_bytes(8, "little") for w in cfg)
    value: dict[str, Any] = {"address": _hex(address)}
    texts = []
    for field, offset, kind in layout.fields:
        value[field], text = _field_value(kind, data, offset - layout.offset)
        texts.append(f"{field}={text}")
    return value, f"{_hex(address)}{{{' '.join(texts)}}}"


def _grid_block(cfg: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Six unsigned ints at the start of both config structs: grid x,y,z, block x,y,z."""
    w0, w1, w2 = cfg[0], cfg[1], cfg[2]
    return ([w0 & 0xFFFFFFFF, w0 >> 32, w1 & 0xFFFFFFFF],
            [w1 >> 32, w2 & 0xFFFFFFFF, w2 >> 32])


def _launch_config(cfg: tuple[int, ...]) -> dict[str, Any]:
    """Fields of a cudaLaunchConfig_t: gridDim, blockDim (dim3 each), size_t smem, stream."""
    grid, block = _grid_block(cfg)
    return {"gridDim": grid, "blockDim": block, "dynamicSmemBytes": cfg[3], "stream": _hex(cfg[4])}


def _cu_launch_config(cfg: tuple[int, ...]) -> dict[str, Any]:
    """Fields of a CUlaunchConfig: six unsigned ints, unsigned int sharedMemBytes (then
    4 bytes of padding), hStream at byte 32."""
    grid, block = _grid_block(cfg)
    return {"gridDim": grid, "blockDim": block, "sharedMemBytes": cfg[3] & 0xFFFFFFFF,
            "hStream": _hex(cfg[4])}


def config_text(cfg: dict[str, Any]) -> str:
    """A launch config's DETAILS text, from its CONFIG_DECODERS fields."""
    grid, block, smem, stream = cfg.values()
    return (f"grid={_dim3_text(grid)} block={_dim3_text(block)} smem={humanize_bytes(smem)} "
            f"stream={stream}")


def _cstring(raw: RawEvent) -> str:
    """A string argument: read whole at exit (raw.text), or, for a call still
    running, its first bytes copied at entry into the event's cfg words. Either
    is NUL-terminated; one that filled its buffer was cut short, and says so
    with a trailing …."""
    data = raw.text or b"".join(w.to_bytes(8, "little") for w in raw.cfg)
    text = data.split(b"\0", 1)[0]
    cut = len(text) >= (NAME_MAX if raw.text else len(data)) - 1
    return text.decode("utf-8", "replace") + ("…" if cut else "")


# config kind -> decoder of the CFG_WORDS words read at entry; each returns
# gridDim, blockDim, shared memory bytes and stream, in that order
CONFIG_DECODERS = {
    ArgKind.LAUNCH_CONFIG: _launch_config,
    ArgKind.CU_LAUNCH_CONFIG: _cu_launch_config,
}


# kinds decoded with what the catalogue says of the argument's type
_TYPED_DECODERS: dict[ArgKind, Callable[[Arg, RawEvent, int], tuple[Any, str]]] = {
    ArgKind.ENUM: lambda arg, raw, slot: _enum_value(arg.type_name, raw.args[slot]),
    ArgKind.STRUCT: lambda arg, raw, slot: _struct_value(arg, raw.args[slot], raw.cfg),
    ArgKind.BYVAL: lambda arg, raw, slot: _byval_value(raw.args[slot:slot + arg.words]),
}


def launch_name(pid: int, address: int, cfg: tuple[int, ...], symbolize: Symbolizer | None,
                handles: KernelHandles | None) -> str | None:
    """The kernel a launch names by its host stub's `address` (a FUNC
    argument), demangled; `cfg`, the record's, holds where the probe found
    the launch's call site, the first time. None where it has no name."""
    name = None
    if symbolize is not None:
        frame = site_frame(cfg)
        name = symbolize(pid, address, frame) if frame else symbolize(pid, address)
    if not name and handles is not None:
        # CUDA 12+ <<<>>> passes a cudaKernel_t (a CUkernel), not the host
        # stub: named by the traced cuLibraryGetKernel that made it
        handle_name = handles.name(pid, address)
        name = demangle(handle_name) if handle_name else None
    return name or None


def decode_args(
    function: Function, raw: RawEvent, pid: int, symbolize: Symbolizer | None,
    handles: KernelHandles | None = None,
) -> tuple[dict[str, Any], str]:
    args: dict[str, Any] = {}
    parts: list[str] = []
    for arg, slot in zip(function.args, function.slots):
        if slot == NOT_CAPTURED_SLOT:
            args[arg.name], text = NOT_CAPTURED
            parts.append(f"{arg.name}={text}")
            continue
        if arg.kind in _TYPED_DECODERS:
            args[arg.name], text = _TYPED_DECODERS[arg.kind](arg, raw, slot)
            parts.append(f"{arg.name}={text}")
            continue
        if arg.kind in CONFIG_DECODERS:
            args[arg.name] = _hex(raw.args[slot])
            cfg = CONFIG_DECODERS[arg.kind](raw.cfg)
            args.update(cfg)
            parts.append(config_text(cfg))
            continue
        if arg.kind is ArgKind.DIM:
            # gridDimX, gridDimY, gridDimZ -> gridDim: [x, y, z], as the runtime's dim3
            stem, axis = arg.name[:-1], "XYZ".index(arg.name[-1])
            dims = args.setdefault(stem, [0, 0, 0])
            dims[axis] = raw.args[slot] & 0xFFFFFFFF
            if axis == 2:
                parts.append(f"{stem}={_dim3_text(dims)}")
            continue
        if arg.kind is ArgKind.CSTRING:
            args[arg.name] = text = _cstring(raw)
            parts.append(f"{arg.name}={shorten(demangle(text))}")
            continue
        value, text = _decode_arg(arg.kind, raw.args, slot, raw.outs,
                                  function.out_index.get(arg.name))
        args[arg.name] = value
        if raw.text and handles is not None and arg.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION):
            handles.seen_in_record(pid, raw.args[slot], raw.text)
        if arg.kind is ArgKind.FUNC:
            name = launch_name(pid, raw.args[slot], raw.cfg, symbolize, handles)
            if name:
                args[NAME_KEY] = name  # whole in JSONL; shortened in DETAILS
                text = f"{text} {shorten(name)}"
        if arg.kind is ArgKind.CU_FUNCTION and handles is not None:
            name = handles.name(pid, raw.args[slot])
            if name:
                args[NAME_KEY] = demangle(name)
                text = f"{text} {shorten(args[NAME_KEY])}"
            elif raw.args[slot]:  # (NULL is no kernel at all)
                text = f"{text} ({UNKNOWN_WHY})"
        parts.append(f"{arg.name}={text}")
    return args, " ".join(parts)


def decode_event(
    raw: RawEvent,
    probes: list[Probe],
    t0_ns: int,
    symbolize: Symbolizer | None = None,
    in_flight: bool = False,
    handles: KernelHandles | None = None,
) -> Call:
    """Turn one raw event into a Call. `probes[raw.func_id]` names the function.

    With `handles`, driver kernel handles are named, and the ones this call
    made are recorded: decode a process's events in the order they came."""
    if not 0 <= raw.func_id < len(probes):
        raise ValueError(f"event for unknown probe id {raw.func_id}")
    probe = probes[raw.func_id]
    fn = probe.function
    args, details = decode_args(fn, raw, raw.pid, symbolize, handles)
    if handles is not None and not in_flight and raw.ret == 0:
        handles.learn(fn, raw.pid, args)
    details = describe(fn, raw.pid, args, details,
                       handles.communicators if handles is not None else None, humanize_bytes)
    if in_flight:
        duration, ret, ret_name = None, None, None
        details = f"{details} (still running when the trace ended)".lstrip()
    else:
        duration, ret = raw.duration_ns, raw.ret
        ret_name = "" if fn.returns else error_name(fn.api, raw.ret)  # (a string, a struct)
    call = Call(
        time_ms=time_ms(raw.ts_ns, t0_ns),
        ts_ns=raw.ts_ns,
        pid=raw.pid,
        tid=raw.tid,
        process=raw.comm,
        event=probe.symbol,
        api=fn.api,
        category=fn.category,
        duration_ns=duration,
        ret=ret,
        ret_name=ret_name,
        args=args,
        details=details,
    )
    if handles is not None:
        handles.ranks.see(raw.pid)
        call.rank, call.world_size = handles.ranks.of(raw.pid)
    return call
