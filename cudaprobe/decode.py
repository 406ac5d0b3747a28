"""Decode raw events into calls: pure Python, no root, no bcc."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Callable

from .catalogue import ArgKind, Function
from .cuda_errors import error_name
from .demangle import demangle, shorten
from .event import RawEvent
from .handles import NAME_KEY, UNKNOWN_WHY, KernelHandles

MEMCPY_KINDS = {
    0: "HostToHost",
    1: "HostToDevice",
    2: "DeviceToHost",
    3: "DeviceToDevice",
    4: "Default",
}

IN_FLIGHT = "in-flight"

# (pid, address) -> name, or None when unknown; supplied by the kernel-name resolver
Symbolizer = Callable[[int, int], "str | None"]


@dataclass(frozen=True)
class Probe:
    """One probed symbol: a catalogue function under the name it is exported as."""

    func_id: int
    symbol: str
    function: Function


@dataclass
class Call:
    """One traced call, with the keys of the JSONL schema."""

    time_ms: float
    ts_ns: int
    pid: int
    tid: int
    process: str
    event: str
    api: str
    category: str
    duration_ns: int | None
    ret: int | None
    ret_name: str | None
    args: dict[str, Any]
    details: str

    @property
    def in_flight(self) -> bool:
        return self.duration_ns is None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in JSONL_KEYS}


JSONL_KEYS = (
    "time_ms", "ts_ns", "pid", "tid", "process", "event", "api", "category",
    "duration_ns", "ret", "ret_name", "args", "details",
)


def humanize_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def humanize_ns(ns: int) -> str:
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.2f}s"


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


# unsigned integer kinds -> the bits of the argument word they use
_UNSIGNED_MASKS = {
    ArgKind.COUNT: 0xFFFFFFFFFFFFFFFF,
    ArgKind.UINT: 0xFFFFFFFF,
    ArgKind.UINT16: 0xFFFF,
    ArgKind.UINT8: 0xFF,
}
_HEX_KINDS = (ArgKind.PTR, ArgKind.STREAM, ArgKind.EVENT, ArgKind.HANDLE, ArgKind.FUNC,
              ArgKind.CU_FUNCTION)


def _decode_arg(
    kind: ArgKind, words: tuple[int, ...], slot: int, out: int | None
) -> tuple[Any, str]:
    """Return (JSON value, DETAILS text) for one argument."""
    v = words[slot]
    if kind in _HEX_KINDS:
        return _hex(v), _hex(v)
    if kind is ArgKind.SIZE:
        return v, humanize_bytes(v)
    if kind is ArgKind.SIZE32:
        v &= 0xFFFFFFFF
        return v, humanize_bytes(v)
    if kind in _UNSIGNED_MASKS:
        v &= _UNSIGNED_MASKS[kind]
        return v, str(v)
    if kind is ArgKind.INT:
        v = _s32(v)
        return v, str(v)
    if kind is ArgKind.FLAGS:
        v &= 0xFFFFFFFF
        return v, _hex(v)
    if kind is ArgKind.MEMCPY_KIND:
        name = MEMCPY_KINDS.get(v & 0xFFFFFFFF, str(_s32(v)))
        return name, name
    if kind is ArgKind.DIM3:
        d = _dim3(v, words[slot + 1])
        return d, _dim3_text(d)
    assert out is not None, kind
    if kind in (ArgKind.OUT_PTR, ArgKind.OUT_HANDLE, ArgKind.OUT_FUNCTION):
        return _hex(out), _hex(out)
    if kind is ArgKind.OUT_SIZE:
        return out, humanize_bytes(out)
    if kind is ArgKind.OUT_INT:
        out = _s32(out)
        return out, str(out)
    if kind is ArgKind.OUT_FLOAT:
        f = _f32(out)  # NaN/inf (a failed call leaves it unset) is no JSON number: null
        return (f if math.isfinite(f) else None), f"{f:g}"
    raise ValueError(f"no decoder for {kind}")


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


def _cstring(buffer: tuple[int, ...]) -> str:
    """A string copied at entry into the event's cfg words (NUL-terminated there;
    one that filled the buffer was cut short, and says so with a trailing …)."""
    data = b"".join(w.to_bytes(8, "little") for w in buffer)
    text = data.split(b"\0", 1)[0]
    return text.decode("utf-8", "replace") + ("…" if len(text) >= len(data) - 1 else "")


# config kind -> decoder of the CFG_WORDS words read at entry; each returns
# gridDim, blockDim, shared memory bytes and stream, in that order
_CONFIG_DECODERS = {
    ArgKind.LAUNCH_CONFIG: _launch_config,
    ArgKind.CU_LAUNCH_CONFIG: _cu_launch_config,
}


def decode_args(
    function: Function, raw: RawEvent, pid: int, symbolize: Symbolizer | None,
    handles: KernelHandles | None = None,
) -> tuple[dict[str, Any], str]:
    args: dict[str, Any] = {}
    parts: list[str] = []
    for arg, slot in zip(function.args, function.slots):
        if arg.kind in _CONFIG_DECODERS:
            args[arg.name] = _hex(raw.args[slot])
            cfg = _CONFIG_DECODERS[arg.kind](raw.cfg)
            args.update(cfg)
            grid, block, smem, stream = cfg.values()
            parts.append(f"grid={_dim3_text(grid)} block={_dim3_text(block)} "
                         f"smem={humanize_bytes(smem)} stream={stream}")
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
            args[arg.name] = text = _cstring(raw.cfg)
            parts.append(f"{arg.name}={shorten(demangle(text))}")
            continue
        idx = function.out_index.get(arg.name)
        out = raw.outs[idx] if idx is not None else None
        value, text = _decode_arg(arg.kind, raw.args, slot, out)
        args[arg.name] = value
        if arg.kind is ArgKind.FUNC:
            name = symbolize(pid, raw.args[slot]) if symbolize is not None else None
            if not name and handles is not None:
                # CUDA 12+ <<<>>> passes a cudaKernel_t (a CUkernel), not the host
                # stub: named by the traced cuLibraryGetKernel that made it
                handle_name = handles.name(pid, raw.args[slot])
                name = demangle(handle_name) if handle_name else None
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
    if in_flight:
        duration, ret, ret_name = None, None, None
        details = f"{details} (still running when the trace ended)".lstrip()
    else:
        duration, ret, ret_name = raw.duration_ns, raw.ret, error_name(fn.api, raw.ret)
    return Call(
        time_ms=round((raw.ts_ns - t0_ns) / 1e6, 3),
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
