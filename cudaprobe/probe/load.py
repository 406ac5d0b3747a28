"""Loading the BPF program: what the machine must have first
(prepare_machine), bcc imported (import_bcc) and the program compiled, or
loaded from the cache where it was compiled before (load_program, load_text;
bpfcache.py). bcc raises bare `Exception`s; compiling's become BpfError here.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, TypeVar

from cudaprobe.errors import BccMissing, BpfError, NotRoot
from cudaprobe.probe import bpfcache, bpfprog, cleanup
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
    """The loaded program (a bcc.BPF), its maps created; nothing attached yet.
    Compiled by bcc, or loaded from the cache where the same source, settings,
    kernel and bcc compiled it before (bpfcache.py). Root only."""
    if os.geteuid() != 0:
        raise NotRoot()
    bcc = import_bcc()
    return load_text(bcc, bpfprog.source(settings).encode(), bpfprog.cflags(plan.probes, settings))


def load_text(bcc: Any, text: bytes, cflags: list[str]) -> Any:
    """`text` compiled with `cflags`, or its instructions kept from an earlier
    compile; a compiled program is kept for the next session."""
    key = bpfcache.cache_key(text, cflags, bpfcache.bcc_identity(bcc))
    program = bpfcache.load(key)
    if program is not None:
        from cudaprobe.probe.cachedbpf import CachedBPF  # noqa: PLC0415 - needs bcc

        try:
            bpf = retry_interrupted(lambda: CachedBPF(program))
        except bpfcache.NotRelocatable:
            pass  # not an entry this code made: compiled again, and replaced
        except Exception as e:
            raise BpfError("loading the BPF program failed", str(e),
                           fix="run `cudaprobe doctor`") from None
        else:
            return bpf
    try:
        bpf = retry_interrupted(lambda: bcc.BPF(text=text, cflags=cflags))
    except Exception as e:  # bcc: compile errors are printed above by clang
        raise BpfError("compiling the BPF program failed", str(e),
                       fix="run `cudaprobe doctor`") from None
    keep(bpf, key)
    return bpf


def keep(bpf: Any, key: str) -> None:
    """Keep what bcc compiled under `key`, where it can be (quietly not: the
    next session compiles again)."""
    from cudaprobe.probe.cachedbpf import extract  # noqa: PLC0415 - needs bcc

    try:
        program = extract(bpf)
    except (ValueError, OSError):
        return
    bpfcache.store(key, program)
