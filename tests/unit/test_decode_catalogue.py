"""Every catalogue function decodes every argument by its kind.

For each function the test puts a distinct value in each argument's word (or
out-parameter, or the words copied at entry), with garbage above the 32 bits
that a 32-bit argument uses, and works out on its own what each argument must
decode to: its JSON value and its DETAILS text.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.catalogue.functions import ArgKind as K
from cudaprobe.catalogue.generated import ENUMS
from cudaprobe.catalogue.structs import LAYOUTS
from cudaprobe.decode.calls import decode_event, humanize_bytes
from cudaprobe.decode.handles import UNKNOWN_WHY, KernelHandles
from cudaprobe.probe.event import CFG_WORDS

from ..every import check_every
from .eventbuild import make_event, probes_for

GARBAGE = 0xDEAD_BEEF_0000_0000  # the upper half of a word holding a 32-bit argument
HEX = {K.PTR, K.STREAM, K.EVENT, K.HANDLE, K.FUNC, K.CU_FUNCTION}
OUT_HEX = {K.OUT_PTR, K.OUT_HANDLE, K.OUT_FUNCTION}


def lo_hi(a: int, b: int) -> int:
    """Two unsigned ints packed in one word, `a` first (little-endian)."""
    return a | (b << 32)


def cstring(text: str) -> tuple[int, ...]:
    data = text.encode().ljust(8 * CFG_WORDS, b"\0")
    return tuple(int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8))


def dims(v: list[int]) -> str:
    return f"({v[0]},{v[1]},{v[2]})"


class Expected:
    """The words of one call of `fn`, and what decoding them must give."""

    def __init__(self, fn: catalogue.Function, read_outs: bool) -> None:
        self.words = [0] * fn.words
        self.outs = [0] * len(fn.out_index)
        self.cfg: tuple[int, ...] = ()
        self.args: dict[str, Any] = {}
        self.texts: list[str] = []
        self.read_outs = read_outs
        for i, (arg, slot) in enumerate(zip(fn.args, fn.slots)):
            self.add(arg, slot, fn.out_index.get(arg.name), i + 1)
        if fn.api == "nccl":
            self.nccl(fn)

    def nccl(self, fn: catalogue.Function) -> None:
        """What an NCCL call adds: the bytes of its count of its datatype (here
        ncclInt8, the enum's first: a byte each), and for a communicator it is
        given that no traced call made, rank and nranks unknown, but what the
        call itself asked of it (ncclCommUserRank: its rank; ncclCommCount: its
        number of ranks), where it succeeded."""
        count = next((self.args[a] for a in ("count", "sendcount", "recvcount")
                      if isinstance(self.args.get(a), int)), None)
        if count is not None and self.args.get("datatype") == "ncclInt8":
            self.args["bytes"] = count
            self.say("datatype", f"bytes={humanize_bytes(count)}")
        if any(a.name == "comm" and a.kind is K.HANDLE for a in fn.args):
            rank = self.args["rank"] if fn.name == "ncclCommUserRank" else None
            nranks = self.args["count"] if fn.name == "ncclCommCount" else None
            self.args["rank"], self.args["nranks"] = rank, nranks
            self.say("comm", "(rank unknown)" if rank is None and nranks is None else
                     f"(rank {'?' if rank is None else rank} of "
                     f"{'?' if nranks is None else nranks})")

    def say(self, name: str, more: str) -> None:
        at = next(i for i, t in enumerate(self.texts) if t.startswith(name + "="))
        self.texts[at] += " " + more

    def value(self, name: str, value: Any, text: str) -> None:
        self.args[name] = value
        self.texts.append(f"{name}={text}")

    def out(self, name: str, index: int, word: int, value: Any, text: str) -> None:
        self.outs[index] = word
        if self.read_outs:
            self.value(name, value, text)
        else:  # a failed call's out-parameters are not read
            self.value(name, None, "-")

    def add(self, arg: catalogue.Arg, slot: int, out: int | None, i: int) -> None:
        kind, name, words = arg.kind, arg.name, self.words
        if slot == -1:
            self.value(name, None, "?")  # not in any word the probe reads
        elif kind in HEX:
            words[slot] = 0x7F00_0000_1000 + 0x10 * i
            text = f"{words[slot]:#x}"
            self.value(name, text, f"{text} ({UNKNOWN_WHY})" if kind is K.CU_FUNCTION else text)
        elif kind in (K.SIZE, K.COUNT):
            words[slot] = (3 << 40) + i  # 64 bits: nothing above is dropped
            self.value(name, words[slot],
                       humanize_bytes(words[slot]) if kind is K.SIZE else str(words[slot]))
        elif kind is K.SIZE32:
            words[slot] = GARBAGE | (4096 + i)
            self.value(name, 4096 + i, humanize_bytes(4096 + i))
        elif kind is K.INT:
            words[slot] = GARBAGE | ((-i) & 0xFFFFFFFF)
            self.value(name, -i, str(-i))
        elif kind in (K.UINT, K.UINT16, K.UINT8):
            bits = {K.UINT: 32, K.UINT16: 16, K.UINT8: 8}[kind]
            top = 1 << (bits - 1)  # the sign bit of its width: still unsigned
            words[slot] = (GARBAGE | 0xFFFFFFFF) & ~((1 << bits) - 1) | top | i
            self.value(name, top | i, str(top | i))
        elif kind is K.FLAGS:
            words[slot] = GARBAGE | (0x100 + i)
            self.value(name, 0x100 + i, f"{0x100 + i:#x}")
        elif kind is K.MEMCPY_KIND:
            words[slot] = GARBAGE | 2
            self.value(name, "DeviceToHost", "DeviceToHost")
        elif kind is K.DIM3:
            words[slot], words[slot + 1] = lo_hi(i, i + 1), GARBAGE | (i + 2)
            self.value(name, [i, i + 1, i + 2], dims([i, i + 1, i + 2]))
        elif kind is K.DIM:  # x, y, z of `stem`, decoded together
            stem, axis = name[:-1], "XYZ".index(name[-1])
            words[slot] = GARBAGE | (10 * i + axis)
            shape = self.args.setdefault(stem, [0, 0, 0])
            shape[axis] = 10 * i + axis
            if axis == 2:
                self.texts.append(f"{stem}={dims(shape)}")
        elif kind is K.CSTRING:
            words[slot] = 0x7FFC_0000_0000  # the pointer; the string is copied at entry
            self.cfg = cstring(f"vecAdd_{i}")
            self.value(name, f"vecAdd_{i}", f"vecAdd_{i}")
        elif kind in (K.LAUNCH_CONFIG, K.CU_LAUNCH_CONFIG):
            words[slot] = 0x7FFC_0000_0100
            grid, block = [8, 4, 2], [256, 1, 1]
            smem = 48 << 10  # an unsigned int in a CUlaunchConfig, a size_t in the runtime's
            self.cfg = (lo_hi(8, 4), lo_hi(2, 256), lo_hi(1, 1),
                        (GARBAGE if kind is K.CU_LAUNCH_CONFIG else 0) | smem, 0x5000 + i)
            self.args[name] = f"{words[slot]:#x}"
            keys = (("gridDim", "blockDim", "dynamicSmemBytes", "stream")
                    if kind is K.LAUNCH_CONFIG else
                    ("gridDim", "blockDim", "sharedMemBytes", "hStream"))
            self.args.update(zip(keys, (grid, block, smem, f"{0x5000 + i:#x}")))
            self.texts.append(f"grid={dims(grid)} block={dims(block)} "
                              f"smem={humanize_bytes(smem)} stream={0x5000 + i:#x}")
        elif kind in OUT_HEX:
            self.out(name, out, 0x7E00_0000_0000 + i, f"{0x7E00_0000_0000 + i:#x}",
                     f"{0x7E00_0000_0000 + i:#x}")
        elif kind is K.OUT_SIZE:
            self.out(name, out, (5 << 30) + i, (5 << 30) + i, humanize_bytes((5 << 30) + i))
        elif kind is K.OUT_INT:  # the kernel reads 4 bytes: nothing above them
            self.out(name, out, (-i) & 0xFFFFFFFF, -i, str(-i))
        elif kind is K.OUT_FLOAT:
            bits = struct.unpack("<I", struct.pack("<f", 0.5 + i))[0]
            self.out(name, out, bits, 0.5 + i, f"{0.5 + i:g}")
        elif kind is K.OUT_U64:
            self.out(name, out, (7 << 40) + i, (7 << 40) + i, str((7 << 40) + i))
        elif kind in (K.NOT_CAPTURED, K.STACK_STRUCT):
            self.value(name, None, "?")  # not in any word the probe reads
        elif kind is K.ENUM:  # an enumerator of the headers' enum, garbage above
            value, label = next(iter(ENUMS[arg.type_name].items()))
            words[slot] = GARBAGE | (value & 0xFFFFFFFF)
            self.value(name, label, label)
        elif kind is K.BYVAL:
            got = [0x6100_0000 + 0x10 * i + w for w in range(arg.words)]
            words[slot:slot + arg.words] = got
            texts = [f"{w:#x}" for w in got]
            self.value(name, texts[0] if len(got) == 1 else texts,
                       texts[0] if len(got) == 1 else "{" + ",".join(texts) + "}")
        elif kind is K.STRUCT:
            words[slot] = 0x7FFC_0000_0200
            self.struct(name, LAYOUTS[arg.type_name], words[slot])
        else:
            raise AssertionError(f"{kind}: the test says nothing of what it decodes to")

    def struct(self, name: str, layout, address: int) -> None:
        """Each field of the window copied at entry: a distinct number, or an
        enum's last enumerator; what it must decode to."""
        data = bytearray(8 * CFG_WORDS)
        value: dict[str, Any] = {"address": f"{address:#x}"}
        texts = []
        for n, (field, offset, kind) in enumerate(layout.fields):
            at = offset - layout.offset
            if kind == "dim3":
                struct.pack_into("<3I", data, at, n, n + 1, n + 2)
                value[field], text = [n, n + 1, n + 2], dims([n, n + 1, n + 2])
            elif kind.startswith("enum:"):
                number, label = list(ENUMS[kind[5:]].items())[-1]
                struct.pack_into("<i", data, at, number)
                value[field] = text = label
            else:
                fmt = {"u8": "<B", "u16": "<H", "u32": "<I", "s32": "<i"}.get(kind, "<Q")
                number = 100 + n if fmt != "<Q" else (9 << 33) + n
                struct.pack_into(fmt, data, at, number)
                value[field] = number
                text = str(number)
                if kind == "ptr":
                    value[field] = text = f"{number:#x}"
                elif kind == "size":
                    text = humanize_bytes(number)
            texts.append(f"{field}={text}")
        self.cfg = tuple(int.from_bytes(data[k:k + 8], "little") for k in range(0, len(data), 8))
        self.value(name, value, f"{address:#x}{{{' '.join(texts)}}}")


def decodes_each_argument_by_its_kind(fn: catalogue.Function, ret: int) -> None:
    want = Expected(fn, read_outs=ret == 0)
    raw = make_event(want.words, want.outs, want.cfg, ret=ret)
    c = decode_event(raw, probes_for(fn.symbol), 0, handles=KernelHandles())
    assert (c.event, c.api, c.category, c.ret) == (fn.symbol, fn.api, fn.category, ret)
    assert list(c.args.items()) == list(want.args.items())  # the schema's key order too
    assert c.details == " ".join(want.texts)


@pytest.mark.parametrize("ret", [0, 1], ids=["succeeded", "failed"])
def test_every_function_decodes_each_argument_by_its_kind(ret):
    check_every(catalogue.FUNCTIONS, lambda fn: decodes_each_argument_by_its_kind(fn, ret),
                lambda fn: fn.symbol)


def test_every_kind_is_used_so_the_test_above_decodes_it():
    """A kind that no function uses is not checked above: drop it, or use it."""
    assert {a.kind for f in catalogue.FUNCTIONS for a in f.args} == set(K)
