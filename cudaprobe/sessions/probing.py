"""What every probing command does before and after its session: the request
its options make (ProbeRequest), the probes and the processes to follow
planned from it (plan_targets), and, once planned, the machine made ready and
what is probed said (Probing.begin); the processes let go of at the end
(Probing.close)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from cudaprobe.catalogue.functions import APIS as ALL_APIS
from cudaprobe.catalogue.functions import DRIVER, NCCL, RUNTIME, Function
from cudaprobe.errors import (
    LibraryNotFound,
    NotRoot,
    OtherPidNamespace,
    SymbolMissing,
    UsageError,
)
from cudaprobe.output.notices import announce
from cudaprobe.probe import bpfprog
from cudaprobe.probe.load import prepare_machine
from cudaprobe.probe.plan import ProbePlan, plan_probes
from cudaprobe.probe.sweep import host_pids_visible
from cudaprobe.targets.launch import resolve_command
from cudaprobe.targets.libs import discover_libraries, resolve_lib_arg
from cudaprobe.targets.selection import Targets, initial_libraries

APIS = {"runtime": {RUNTIME}, "driver": {DRIVER}, "nccl": {NCCL}, "all": set(ALL_APIS)}


@dataclass(frozen=True)
class ProbeRequest:
    """What every probing command's options say: the libraries (--lib), the
    functions (-e), the APIs (--api), for how long, --dump-bpf, and which
    processes (-- COMMAND, --pid, --comm, --wait)."""
    libs: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    apis: frozenset[str] = field(default_factory=lambda: frozenset(ALL_APIS))
    duration: float | None = None
    dump_bpf: bool = False
    pids: tuple[int, ...] = ()
    comm: str | None = None
    wait: bool = False
    command: tuple[str, ...] = ()


def resolve_libraries(libs: tuple[str, ...], apis: set[str]) -> list[str]:
    if libs:
        return sorted({p for arg in libs for p in resolve_lib_arg(arg)})
    found = discover_libraries(apis)
    if not found:
        raise LibraryNotFound("(default search)",
                              "no libcudart/libcuda/libnccl found; name one with --lib")
    return found


@dataclass
class Probing:
    """A request planned: the probes, the BPF settings and, when following
    processes, the Targets whose CUDA code is probed."""
    request: ProbeRequest
    plan: ProbePlan
    settings: bpfprog.Settings
    targets: Targets | None

    def begin(self, doing: str) -> Callable[[str], None]:
        """Make the machine ready, and say on stderr what that took, what the
        targets need said and what is probed (`doing`: "tracing", ...). Returns
        the function that says further things the same way."""
        notes = self.targets.notes + self.targets.refusals if self.targets else []
        if self.targets:
            self.targets.refusals.clear()  # said once
        return announce(self.plan, prepare_machine() + notes, doing)

    def close(self) -> None:
        if self.targets is not None:
            self.targets.close()


def plan_targets(functions: list[Function], request: ProbeRequest,
                 **settings: bool) -> Probing:
    """The probes, the BPF settings (`settings` added) and, when following processes
    (-- COMMAND, --pid, --comm), the Targets whose CUDA code is probed."""
    libs, pids, comm, command = request.libs, request.pids, request.comm, request.command
    apis = set(request.apis)
    if command and (pids or comm):
        raise UsageError("-- COMMAND selects the process it starts: leave out --pid and --comm")
    if request.wait and not pids:
        raise UsageError("--wait goes with --pid")
    if comm is not None and not comm.strip():
        raise UsageError("--comm needs a process name (as in /proc/PID/comm)")
    follow = bool(command or pids or comm)
    config = bpfprog.Settings(filter_pid=follow, filter_comm=comm is not None,
                              per_process=follow, **settings)
    if not request.dump_bpf and os.geteuid() != 0:
        raise NotRoot()
    if follow and not request.dump_bpf and not host_pids_visible():
        raise OtherPidNamespace()
    if command:
        resolve_command(list(command))  # before anything is attached, said or written
    targets = None
    if follow:
        targets = Targets([s for f in functions for s in f.symbols], pids, comm,
                          discover=not libs)
        libraries = resolve_libraries(libs, apis) if libs else initial_libraries(
            targets, apis, list(command), request.wait)
    else:
        libraries = resolve_libraries(libs, apis)
    plan = plan_probes(functions, libraries, every_symbol=follow)
    if libs and not plan.attachments:  # --lib turns discovery off: nothing is found later
        raise SymbolMissing(", ".join(libraries), [f.name for f in functions])
    return Probing(request, plan, config, targets)
