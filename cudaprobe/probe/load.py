"""Loading the BPF program: what the machine must have first
(prepare_machine), bcc imported (import_bcc) and the program compiled
(load_program). bcc raises bare `Exception`s; compiling's become BpfError here.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, TypeVar

from cudaprobe.errors import BccMissing, BpfError, NotRoot
from cudaprobe.probe import bpfprog, cleanup
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.targets import environment

T = TypeVar("T")


def prepare_machine() -> list[str]:
    """Everything tracing needs from the machine; returns notes for the user.
    Stale uprobe_events entries are removed once tracefs is there."""
    notes = [environment.ensure_tracefs(), cleanup.remove_stale_uprobe_events(),
             environment.ensure_kernel_headers(), environment.seccomp_warning()]
    return [n for n in notes if n]


def import_bcc() -> Any:
    try:
        # bcc 0.26's own source has invalid escapes ('\.'): Python says so while
        # compiling it (3.12 on stderr as a SyntaxWarning, 3.11 as a
        # DeprecationWarning), a line that is bcc's, not the user's to act on
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            import bcc  # noqa: PLC0415 - imported at run time: not on PyPI
    except ImportError as e:
        raise BccMissing(str(e)) from None
    except OSError as e:  # the module is there, its libbcc.so.0 is not (or is broken)
        raise BccMissing(f"its library: {e}") from None
    return bcc


# the verifier gives up with EAGAIN when a signal comes while it works (a
# profiler's ptrace stops, py-spy's): the load is tried again, a few times
EAGAIN_TEXT = "Resource temporarily unavailable"
LOAD_TRIES = 5


def retry_interrupted(load: Callable[[], T]) -> T:
    """`load()`, again while it fails as a load interrupted by a signal does."""
    for attempt in range(LOAD_TRIES):
        try:
            return load()
        except Exception as e:
            if EAGAIN_TEXT not in str(e) or attempt == LOAD_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def load_program(plan: ProbePlan, settings: bpfprog.Settings) -> Any:
    """The compiled and loaded program (a bcc.BPF), its maps created; nothing
    attached yet. Root only."""
    if os.geteuid() != 0:
        raise NotRoot()
    bcc = import_bcc()
    try:
        return retry_interrupted(lambda: bcc.BPF(text=bpfprog.source(settings).encode(),
                                                 cflags=bpfprog.cflags(plan.probes, settings)))
    except Exception as e:  # bcc: compile errors are printed above by clang
        raise BpfError("compiling the BPF program failed", str(e),
                       fix="run `cudaprobe doctor`") from None
