"""Names of enum values and of return codes, from the headers' enums
(generated.ENUMS)."""

from __future__ import annotations

from functools import cache

from cudaprobe.catalogue.generated import ENUMS


@cache
def _is_flags(enum: str) -> bool:
    """An enum of bits: every non-zero value a power of two, and more than one."""
    values = [v for v in ENUMS.get(enum, {}) if v]
    return len(values) > 1 and all(v > 0 and not v & (v - 1) for v in values)


def enum_name(enum: str, value: int) -> str | None:
    """The enumerator of `enum` that is `value`; for an enum of bits, the
    enumerators of its bits joined by `|`; None where the headers name none."""
    names = ENUMS.get(enum, {})
    name = names.get(value)
    if name is not None or not _is_flags(enum) or value <= 0:
        return name
    parts, rest = [], value
    for bit, bit_name in names.items():
        if bit and rest & bit:
            parts.append(bit_name)
            rest &= ~bit
    return "|".join(parts) if not rest else None


# api -> (the return type's name, its enum in the headers)
_RESULT_ENUMS = {"runtime": ("cudaError", "cudaError"),
                 "driver": ("CUresult", "cudaError_enum"),
                 "nccl": ("ncclResult_t", "ncclResult_t")}


def error_table(api: str) -> dict[int, str]:
    """The names of `api`'s return codes by value: the headers' `enum cudaError`
    (runtime), `enum cudaError_enum` (driver, typedef CUresult) or nccl.h's
    ncclResult_t (nccl)."""
    try:
        return ENUMS[_RESULT_ENUMS[api][1]]
    except KeyError:
        raise ValueError(f"api must be 'runtime', 'driver' or 'nccl', not {api!r}") from None


def error_name(api: str, code: int) -> str:
    """Name a return code: error_name("driver", 100) == "CUDA_ERROR_NO_DEVICE".

    api is "runtime", "driver" or "nccl"; a code the headers do not name renders as
    its type and number, e.g. "cudaError(12345)".
    """
    return error_table(api).get(code, f"{_RESULT_ENUMS[api][0]}({code})")
