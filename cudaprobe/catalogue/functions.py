"""The catalogue: every CUDA and NCCL function, as data.

This is the single source of truth: the BPF probe table, the decoders, the
bpftrace exporter, `cudaprobe list` and the docs are all derived from it.
Its functions are made (build.py) from what the toolkit headers declare
(generated.py, written by scripts/gen-catalogue), by rules on the C types
(kinds.py) and names (categories.py), and one small table of what the
headers cannot say (overrides.py); docs/catalogue.md tells how. The data
model (Function, Arg, ArgKind) is in model.py.
"""

from __future__ import annotations

from cudaprobe.catalogue.build import build_functions
from cudaprobe.catalogue.categories import HOT, is_default
from cudaprobe.catalogue.model import (
    APIS,
    CATEGORIES,
    CONFIG_KINDS,
    CONFIG_MAX_BYTES,
    DRIVER,
    MAX_OUTS,
    MAX_SLOTS,
    NCCL,
    NOT_CAPTURED_SLOT,
    OUT4_KINDS,
    OUT_KINDS,
    REGISTER_SLOTS,
    RUNTIME,
    Arg,
    ArgKind,
    Function,
)

__all__ = ["APIS", "NCCL", "NCCL_FUNCTIONS", "CATEGORIES", "CONFIG_KINDS", "CONFIG_MAX_BYTES",
           "DRIVER", "MAX_OUTS", "MAX_SLOTS",
           "NOT_CAPTURED_SLOT", "OUT4_KINDS", "OUT_KINDS", "REGISTER_SLOTS", "RUNTIME", "Arg",
           "ArgKind", "Function", "HOT", "is_default", "FUNCTIONS", "RUNTIME_FUNCTIONS",
           "DRIVER_FUNCTIONS", "BY_SYMBOL", "BY_EXPORTED", "BY_NAME", "MEMCPY_KINDS"]

FUNCTIONS: tuple[Function, ...] = build_functions()
RUNTIME_FUNCTIONS = tuple(f for f in FUNCTIONS if f.api == RUNTIME)
DRIVER_FUNCTIONS = tuple(f for f in FUNCTIONS if f.api == DRIVER)
NCCL_FUNCTIONS = tuple(f for f in FUNCTIONS if f.api == NCCL)

# exported symbol (without variant suffix) -> function; unique
BY_SYMBOL: dict[str, Function] = {f.symbol: f for f in FUNCTIONS}
# every exported symbol (versions and variants too: cudaLaunchKernel_ptsz,
# cuMemAlloc_v2) -> its function, as events name it
BY_EXPORTED: dict[str, Function] = {s: f for f in FUNCTIONS for s in f.symbols}
# header name -> function; where one name has several ABI versions
# (cuCtxCreate_v2, _v4) this holds the newest, as the current headers declare it
BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}


# cudaMemcpyKind, short (the runtime's names less `cudaMemcpy`)
MEMCPY_KINDS = {
    0: "HostToHost",
    1: "HostToDevice",
    2: "DeviceToHost",
    3: "DeviceToDevice",
    4: "Default",
}
