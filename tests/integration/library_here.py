"""The GPU-time library loaded into this process, for the scripts that call
its attach function as cudaprobe's stub calls it (call_ties_workload.py,
cupti_detach_workload.py): inject.h's numbers, and gputime_inject_attach."""

import ctypes
import re


def load(library: str, header: str):
    """(inject.h's #defines by name, the library's gputime_inject_attach)."""
    with open(header) as f:
        layout = {k: int(v, 0) for k, v in
                  re.findall(r"^#define (\w+) (0x[0-9a-fA-F]+|\d+)\b", f.read(), re.M)}
    attach = ctypes.CDLL(library).gputime_inject_attach
    attach.restype = ctypes.c_void_p
    attach.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64]
    return layout, attach
