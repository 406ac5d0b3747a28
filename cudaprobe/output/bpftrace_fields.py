"""Each argument kind as bpftrace text: how its words are saved at entry and
printed at return. Used by export_bpftrace; mirrors decode.py's DETAILS.

bpftrace 0.17 has no arg6+ on x86-64, no sprintf and no floating point, so
stack words are read with reg("sp"), and floats are taken apart by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cudaprobe.catalogue.functions import (
    MEMCPY_KINDS,
    NOT_CAPTURED_SLOT,
    REGISTER_SLOTS,
    Arg,
    ArgKind,
    Function,
)

CONFIG_WORDS = 5  # of a launch config struct: what DETAILS shows of it

# kinds printed from their argument word: printf conversion, cast
_SCALARS = {
    ArgKind.PTR: ("0x%lx", ""),
    ArgKind.STREAM: ("0x%lx", ""),
    ArgKind.EVENT: ("0x%lx", ""),
    ArgKind.HANDLE: ("0x%lx", ""),
    # a driver kernel handle: its name is on the cuModuleGetFunction or
    # cuLibraryGetKernel line that made it (a name per launch costs more BPF
    # stack than the biggest launches have left)
    ArgKind.CU_FUNCTION: ("0x%lx", ""),
    ArgKind.SIZE: ("%lu", ""),
    ArgKind.COUNT: ("%lu", ""),
    ArgKind.SIZE32: ("%u", "(uint32)"),
    ArgKind.INT: ("%d", "(int32)"),
    ArgKind.UINT: ("%u", "(uint32)"),
    ArgKind.UINT16: ("%u", "(uint16)"),
    ArgKind.UINT8: ("%u", "(uint8)"),
    ArgKind.FLAGS: ("0x%x", "(uint32)"),
    # named by `cudaprobe trace`; here their number, their address, their first word
    ArgKind.ENUM: ("%d", "(int32)"),
    ArgKind.STRUCT: ("0x%lx", ""),
    ArgKind.BYVAL: ("0x%lx", ""),
}
# out-parameters, read at return through the pointer saved at entry:
# target type, printf conversion
_OUTS = {
    ArgKind.OUT_PTR: ("uint64", "0x%lx"),
    ArgKind.OUT_HANDLE: ("uint64", "0x%lx"),
    ArgKind.OUT_FUNCTION: ("uint64", "0x%lx"),
    ArgKind.OUT_SIZE: ("uint64", "%lu"),
    ArgKind.OUT_INT: ("int32", "%d"),
    ArgKind.OUT_U64: ("uint64", "%lu"),
}
# launch config structs start with (grid x,y | grid z, block x | block y,z),
# then shared memory bytes (a size_t, or an unsigned int), then the stream
_CONFIG_SMEM_CAST = {ArgKind.LAUNCH_CONFIG: "", ArgKind.CU_LAUNCH_CONFIG: "(uint32)"}


def launch_config_slot(fn: Function) -> int:
    """Slot of a launch config the script copies at entry, or -1."""
    arg = fn.config_arg
    return fn.config_slot if arg is not None and arg.kind in _CONFIG_SMEM_CAST else -1


@dataclass
class Field:
    """One argument's part of DETAILS: printf text, its values, and the
    statements at return that compute them."""

    fmt: str
    values: list[str]
    setup: list[str] = field(default_factory=list)


def entry_word(slot: int) -> str:
    """The expression for argument word `slot` at function entry."""
    if slot < REGISTER_SLOTS:
        return f"arg{slot}"
    # the 7th word is just above the return address
    return f'*uptr((uint64 *)(reg("sp") + {8 * (slot - REGISTER_SLOTS + 1)}))'


def arg_words(fn: Function) -> list[tuple[str, int]]:
    """(name, slot) of every argument word saved at entry."""
    words = []
    for arg, slot in zip(fn.args, fn.slots):
        if slot == NOT_CAPTURED_SLOT:
            continue
        words.append((arg.name, slot))
        if arg.kind is ArgKind.DIM3:
            words.append((arg.name + "_z", slot + 1))
    return words




def _float_setup(var: str, bits: str) -> list[str]:
    """Statements that split the IEEE-754 float in `bits` into sign, integer
    part and millionths, printed "%s%lu.%06lu". NaN, infinity and values of
    2^40 and more print as "nan:", "inf:" or "huge:" and 0.000000."""
    x = "$" + var
    return [
        f"{x}_bits = {bits};",
        f'{x}_sign = {x}_bits >> 31 ? "-" : "";',
        f"{x}_exp = ({x}_bits >> 23) & 0xff;",
        f"{x}_man = {x}_bits & 0x7fffff;",
        f"{x}_int = (uint64)0;",
        f"{x}_frac = (uint64)0;",
        f"if ({x}_exp == 0xff) {{",
        f'\t{x}_sign = {x}_man ? "nan:" : "inf:";',
        f"}} else if ({x}_exp >= 190) {{",
        f'\t{x}_sign = "huge:";',
        "} else {",
        f"\tif ({x}_exp != 0) {{ {x}_man = {x}_man | 0x800000; }} else {{ {x}_exp = 1; }}",
        f"\tif ({x}_exp >= 150) {{",
        f"\t\t{x}_int = {x}_man << ({x}_exp - 150);",
        f"\t}} else if (150 - {x}_exp < 64) {{",
        f"\t\t{x}_shift = 150 - {x}_exp;",
        f"\t\t{x}_int = {x}_man >> {x}_shift;",
        f"\t\t{x}_frac = (({x}_man & ((1 << {x}_shift) - 1)) * 1000000) >> {x}_shift;",
        "\t}",
        "}",
    ]


def arg_field(arg: Arg, slot: int, probe_id: int) -> Field | None:
    """DETAILS text for one argument at return, where `$<name>` holds its word.
    None for the X and Y of a DIM triple, which print with its Z."""
    v, name, k = f"${arg.name}", arg.name, arg.kind
    if slot == NOT_CAPTURED_SLOT or k in (ArgKind.NOT_CAPTURED, ArgKind.STACK_STRUCT):
        return Field(f"{name}=?", [])
    if k in _SCALARS:
        conversion, cast = _SCALARS[k]
        return Field(f"{name}={conversion}", [cast + v])
    if k in _OUTS:
        target, conversion = _OUTS[k]
        return Field(f"{name}={conversion}", [f"{v}_out"], [f"{v}_out = *uptr(({target} *){v});"])
    if k is ArgKind.MEMCPY_KIND:
        # a kind without a name prints as its number: %.0d prints nothing for 0
        known = f"{v}_value >= 0 && {v}_value <= {max(MEMCPY_KINDS)}"
        return Field(f"{name}=%s%.0d", [f"@memcpy_kind[{v}_value]", f"{known} ? 0 : {v}_value"],
                     [f"{v}_value = (int32){v};"])
    if k is ArgKind.DIM3:
        return Field(f"{name}=(%u,%u,%u)", [f"(uint32){v}", f"{v} >> 32", f"(uint32){v}_z"])
    if k is ArgKind.DIM:  # gridDimX, gridDimY, gridDimZ print as gridDim=(x,y,z)
        if name[-1] != "Z":
            return None
        return Field(f"{name[:-1]}=(%u,%u,%u)", [f"(uint32){v[:-1]}{a}" for a in "XYZ"])
    if k is ArgKind.FUNC:
        # the stub's name by usym(), or its address where bpftrace cannot name it:
        # it looks the address up in /proc/PID/maps when it prints the line, so
        # not once the process has exited; nor a CUDA 12+ driver's cudaKernel_t
        # handle, which no symbol holds (docs/export.md)
        return Field(f"{name}=%s", [f"usym({v})"])
    if k is ArgKind.CSTRING:
        return Field(f"{name}=%s", [f"@str[tid, {probe_id}]"])
    if k in _CONFIG_SMEM_CAST:
        w = [f"$cfg.{i}" for i in range(CONFIG_WORDS)]
        return Field(
            "grid=(%u,%u,%u) block=(%u,%u,%u) smem=%lu stream=0x%lx",
            [f"(uint32){w[0]}", f"{w[0]} >> 32", f"(uint32){w[1]}", f"{w[1]} >> 32",
             f"(uint32){w[2]}", f"{w[2]} >> 32", _CONFIG_SMEM_CAST[k] + w[3], w[4]],
            [f"$cfg = @cfg[tid, {probe_id}];"])
    if k is ArgKind.OUT_FLOAT:
        return Field(f"{name}=%s%lu.%06lu", [f"{v}_sign", f"{v}_int", f"{v}_frac"],
                     _float_setup(name, f"*uptr((uint32 *){v})"))
    raise ValueError(f"no bpftrace decoder for argument kind {k}")
