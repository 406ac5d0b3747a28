"""The catalogue's functions, made from what the headers declare.

generated.py (scripts/gen-catalogue) -> kinds.arg_of per parameter, with
overrides.ARGS first -> categories.category_of per name, with
overrides.CATEGORIES first -> Function. Then the limits of the BPF event: at
most MAX_OUTS out-parameters read at exit and one argument copied at entry
per function; arguments past those are captured as plain pointers (their
address, not what they point at), never dropped with their function.
"""

from __future__ import annotations

from cudaprobe.catalogue import generated, overrides
from cudaprobe.catalogue.categories import category_of
from cudaprobe.catalogue.kinds import arg_of
from cudaprobe.catalogue.model import (
    CONFIG_KINDS,
    DRIVER,
    MAX_OUTS,
    NCCL,
    OUT_KINDS,
    RUNTIME,
    Arg,
    ArgKind,
    Function,
)

STATUS_TYPES = {"cudaError_t", "CUresult", "ncclResult_t"}
COPIED_KINDS = CONFIG_KINDS | {ArgKind.CSTRING}
KERNEL_KINDS = {ArgKind.FUNC, ArgKind.CU_FUNCTION}


def make_args(fn_name: str, params: tuple[tuple[str, str, str], ...]) -> tuple[Arg, ...]:
    args, outs, copied, kernel = [], 0, False, False
    for name, ctype, resolved in params:
        arg = arg_of(name, ctype, resolved)
        kind = overrides.ARGS.get((fn_name, name))
        if kind is not None:
            arg = Arg(name, kind, ctype)
        # the event's limits: demote to the pointer itself what does not fit
        if ((arg.kind in OUT_KINDS and outs == MAX_OUTS)
                or (arg.kind in COPIED_KINDS and copied)
                or (arg.kind in KERNEL_KINDS and kernel)):
            arg = Arg(name, ArgKind.PTR, ctype)
        outs += arg.kind in OUT_KINDS
        copied |= arg.kind in COPIED_KINDS
        kernel |= arg.kind in KERNEL_KINDS
        args.append(arg)
    return tuple(args)


def make_function(api: str, entry: tuple) -> Function:
    name, version, variants, deprecated, returns, params = entry
    category = overrides.CATEGORIES.get(name) or category_of(name)
    return Function(name, api, category, make_args(name, params), tuple(variants), version,
                    deprecated, "" if returns in STATUS_TYPES else returns)


def build_functions() -> tuple[Function, ...]:
    older = {(name, version): params for name, version, params in overrides.OLDER_HEADERS}
    functions = []
    for api, declared in ((RUNTIME, generated.RUNTIME), (DRIVER, generated.DRIVER),
                          (NCCL, generated.NCCL)):
        for entry in declared:
            # a name's older ABI version comes first: BY_NAME keeps the newest
            functions += [make_function(api, (name, version, (), False, "CUresult", params))
                          for (name, version), params in older.items() if name == entry[0]]
            functions.append(make_function(api, entry))
    return tuple(functions)
