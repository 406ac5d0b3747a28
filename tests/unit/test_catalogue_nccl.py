"""The NCCL tables against nccl.h and the libnccl.so.2 of the same wheel
(nvidia-nccl-cu13, unpacked by scripts/setup): every function the library
exports is catalogued, but for the device API that nccl.h does not declare;
each collective's arguments are captured where the x86-64 ABI puts them.
test_catalogue_headers.py checks that generated.py is what the generator
makes of the header."""

from __future__ import annotations

import re

import pytest
from elftools.elf.elffile import ELFFile

from cudaprobe.catalogue import generated
from cudaprobe.catalogue.enums import enum_name, error_name
from cudaprobe.catalogue.functions import BY_NAME, NCCL_FUNCTIONS, ArgKind, is_default
from cudaprobe.decode.nccl import DATATYPE_SIZES
from cudaprobe.targets.libs import api_of

from ..conftest import NCCL_HOME

K = ArgKind
# exported, not in nccl.h: NCCL's internal entry
INTERNAL = {"ncclResetDebugInitInternal"}


def exported_functions(path) -> set[str]:
    """The functions a library exports (its .dynsym's defined STT_FUNCs), read
    with pyelftools: not the reader under test."""
    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".dynsym")
        return {s.name for s in table.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF"}


def test_every_exported_nccl_function_is_catalogued_or_device_api(libnccl):
    exported = {s for s in exported_functions(libnccl) if s.startswith("nccl")}
    catalogued = {f.symbol for f in NCCL_FUNCTIONS}
    assert catalogued <= exported  # (no version suffixes or variants in NCCL)
    # the rest: the device API's host side, declared in the C++ headers of
    # nccl_device/ (templates pycparser cannot read), and the internal entry
    device_text = "\n".join(p.read_text() for p in (NCCL_HOME / "include" / "nccl_device")
                            .rglob("*.h"))
    rest = exported - catalogued - INTERNAL
    assert rest and all(re.search(rf"\b{name}\(", device_text) for name in rest), rest
    header = (NCCL_HOME / "include" / "nccl.h").read_text()
    assert not re.search(r"\bncclResetDebugInitInternal\b", header)
    assert len(generated.NCCL) == len(re.findall(r"^\w[\w *]*?\bnccl[A-Z]\w*\(", header,
                                                  re.M)) == 41
    assert generated.NCCL_VERSION_CODE == 22809  # 2.28.9: what PyTorch 2.11 ships


@pytest.mark.parametrize(("name", "stream_slot", "rest"), [
    ("ncclAllReduce", 6, {"count": K.COUNT, "op": K.ENUM}),
    ("ncclReduce", 7, {"count": K.COUNT, "op": K.ENUM, "root": K.INT}),
    ("ncclBroadcast", 6, {"count": K.COUNT, "root": K.INT}),
    ("ncclAllGather", 5, {"sendcount": K.COUNT}),
    ("ncclReduceScatter", 6, {"recvcount": K.COUNT, "op": K.ENUM}),
    ("ncclSend", 5, {"count": K.COUNT, "peer": K.INT}),
    ("ncclRecv", 5, {"count": K.COUNT, "peer": K.INT}),
])
def test_collectives_capture_every_argument(name, stream_slot, rest):
    fn = BY_NAME[name]
    kinds = {a.name: a.kind for a in fn.args}
    slots = dict(zip(kinds, fn.slots))
    assert kinds["datatype"] is K.ENUM and kinds["comm"] is K.HANDLE
    assert kinds["stream"] is K.STREAM and slots["stream"] == stream_slot  # on the stack
    assert {n: kinds[n] for n in rest} == rest
    assert -1 not in fn.slots and fn.returns == "" and fn.api == "nccl"


def test_communicator_makers_read_the_new_communicator_at_exit():
    init = BY_NAME["ncclCommInitRank"]
    kinds = {a.name: (a.kind, s) for a, s in zip(init.args, init.slots)}
    # ncclUniqueId (128 bytes) goes on the stack: rank still takes the third register
    assert kinds == {"comm": (K.OUT_HANDLE, 0), "nranks": (K.INT, 1),
                     "commId": (K.STACK_STRUCT, -1), "rank": (K.INT, 2)}
    split = {a.name: a.kind for a in BY_NAME["ncclCommSplit"].args}
    assert split["newcomm"] is K.OUT_HANDLE and split["comm"] is K.HANDLE
    assert {a.name: a.kind for a in BY_NAME["ncclCommCount"].args}["count"] is K.OUT_INT
    assert {a.name: a.kind for a in BY_NAME["ncclCommShrink"].args}["excludeRanksList"] is K.PTR


def test_categories_and_the_default_set():
    by_category: dict[str, set[str]] = {}
    for f in NCCL_FUNCTIONS:
        by_category.setdefault(f.category, set()).add(f.name)
    assert by_category["collective"] == {"ncclAllReduce", "ncclReduce", "ncclBcast",
                                         "ncclBroadcast", "ncclAllGather", "ncclReduceScatter",
                                         "ncclAlltoAll", "ncclGather", "ncclScatter"}
    assert by_category["p2p"] == {"ncclSend", "ncclRecv"}
    assert by_category["group"] == {"ncclGroupStart", "ncclGroupEnd", "ncclGroupSimulateEnd"}
    assert set(by_category) == {"collective", "p2p", "group", "comm"}
    assert {"ncclCommInitRank", "ncclCommSplit", "ncclCommDestroy"} <= by_category["comm"]
    # the watchdog's polling (PyTorch asks ncclCommGetAsyncError in a loop) is no default
    assert not is_default("ncclCommGetAsyncError", "comm")
    assert is_default("ncclAllReduce", "collective") and is_default("ncclGroupEnd", "group")


def test_enums_and_return_codes_are_named():
    assert enum_name("ncclDataType_t", 7) == "ncclFloat32"
    assert enum_name("ncclDataType_t", 9) == "ncclBfloat16"
    assert enum_name("ncclRedOp_t", 2) == "ncclMax"
    # the count of operators is no operator: ncclRedOpCreatePreMulSum makes op 5 on
    assert enum_name("ncclRedOp_t", 5) is None
    assert error_name("nccl", 4) == "ncclInvalidArgument"
    assert error_name("nccl", 99) == "ncclResult_t(99)"
    # a size for every datatype the header names
    assert set(DATATYPE_SIZES) == set(generated.ENUMS["ncclDataType_t"].values())


def test_libnccl_is_the_nccl_api():
    assert api_of("/x/nvidia/nccl/lib/libnccl.so.2") == "nccl"
    assert api_of("/x/libnccl.so") == "nccl"
    assert api_of("/x/libnccl-net.so") is None
