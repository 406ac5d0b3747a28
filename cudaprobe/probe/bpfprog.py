"""The BPF programs: bpf/trace.bpf.c or bpf/stats.bpf.c, with settings as -D cflags.

Both include bpf/cudaprobe.h (shared with the Python mirror, event.py) and
bpf/pairing.bpf.h (what they share: the common maps, pairing, the programs the
loader attaches). bcc rewrites map calls (`owners.lookup(...)`) only in the
text it is given, not in the files that text includes: so it is given the
program with bpf/'s headers inlined (`source`), which is also what
`--dump-bpf` prints. Every number the C uses comes from `Settings` here: the
C has no default, and stops at `#error` for one it is not given.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from cudaprobe.catalogue.functions import NCCL, ArgKind
from cudaprobe.errors import EnvironmentProblem
from cudaprobe.probe import event, kernel_btf, uprobe_multi
from cudaprobe.probe.plan import Probe
from cudaprobe.targets.environment import kernel_version

PROGRAMS = {"trace": "trace.bpf.c", "stats": "stats.bpf.c"}


def bpf_dir() -> Path:
    """bpf/ sources: shipped as package data, or the source tree's top-level bpf/."""
    package = Path(__file__).resolve().parent.parent  # cudaprobe/
    for candidate in (package / "bpf", package.parent / "bpf"):
        if (candidate / PROGRAMS["trace"]).is_file():
            return candidate
    raise FileNotFoundError(f"{PROGRAMS['trace']} is not installed next to {package}")


ATTACH_MODES = ("multi", "perf")


def default_attach() -> str:
    """uprobe_multi where the kernel has it; CUDAPROBE_ATTACH=perf|multi overrides."""
    forced = os.environ.get("CUDAPROBE_ATTACH")
    if forced in ATTACH_MODES:
        return forced
    return "multi" if uprobe_multi.supported() else "perf"


def default_may_goto() -> bool:
    """may_goto where the kernel has it (6.9+); CUDAPROBE_MAY_GOTO=0|1 overrides
    (0: the bounded loops older kernels get)."""
    forced = os.environ.get("CUDAPROBE_MAY_GOTO")
    if forced in ("0", "1"):
        return forced == "1"
    return kernel_version() >= (6, 9)


def default_py_wakers() -> bool:
    """Who woke whom, for borrowed stacks, where the kernel gives a program the
    waker's saved registers (bpf_task_pt_regs, 5.15+); CUDAPROBE_PY_WAKERS=0|1
    overrides (0: the older kernels' program)."""
    forced = os.environ.get("CUDAPROBE_PY_WAKERS")
    if forced in ("0", "1"):
        return forced == "1"
    return kernel_version() >= (5, 15)


@dataclass(frozen=True)
class Settings:
    ringbuf_pages: int = 4096  # 16 MiB with 4 KiB pages
    max_inflight: int = 16384  # pairing entries of threads without a slot (`inflight`)
    wakeup_every: int = 1024  # a forced reader wakeup every N records per CPU
    max_stacks: int = 16384  # user stacks kept (`stacks`, with stacks=True)
    max_targets: int = 65536  # processes traced with filter_pid (`targets`)
    max_libraries: int = 1024  # libraries probed in a session (`library_ready`)
    max_procs: int = 16384  # processes whose first record woke the reader (`seen_procs`)
    max_sites: int = 16384  # host stubs and call sites located, per process (`located`)
    max_handles: int = 16384  # kernel handles named, per process (`handle_named`)
    error_codes_per_probe: int = 16  # return codes past CP_ERR_SLOTS (`error_codes`)
    max_py_procs: int = 16384  # processes whose interpreter was looked for (`py_procs`)
    max_py_exes: int = 256  # interpreter executables described (`py_exes`)
    max_py_threads: int = 65536  # threads' PyThreadState cached (`py_tstates`)
    max_py_codes: int = 65536  # code objects whose record was sent (`py_codes_seen`)
    # the GPU-time injection's safe point (bpf/safepoint.bpf.c, probe/safepoint.py)
    max_safepoint_ranges: int = 32  # CUDA libraries' code ranges (`inside`)
    max_safepoint_threads: int = 4096  # threads whose CUDA calls are counted (`seen`)
    max_safepoint_armed: int = 64  # threads seized at once (`armed`, `signalled`)
    max_safepoint_procs: int = 1024  # processes being injected at once (`inside`)
    filter_pid: bool = False
    filter_comm: bool = False  # with filter_pid: exec under the --comm name joins `targets`
    # uprobe_multi links per target process (--pid, --comm, -- COMMAND), so that
    # other processes mapping the library take no trap; else one link per library
    per_process: bool = False
    errors_only: bool = False
    stats: bool = False  # aggregate in the kernel (cudaprobe stats) instead of emitting events
    stacks: bool = False  # record user stacks (cudaprobe memory --stacks)
    callers: bool = False  # record each call's return address (cudaprobe memory)
    py_stacks: bool = False  # send each call's Python stack (--py-stacks; trace records only)
    # serve --duty: functions (catalogue names) whose links stay on between slices,
    # counted exactly: the allocations and frees (live memory, out-of-memory errors)
    duty_exact: frozenset = frozenset()
    # "multi": uprobe_multi links (Linux >= 6.6); "perf": one perf event per probe
    attach: str = field(default_factory=lambda: default_attach())
    # may_goto (Linux >= 6.9): --py-stacks walks a thread list of any length;
    # without it, the first CP_PY_WALK_BOUNDED states (and a longer list is said)
    may_goto: bool = field(default_factory=lambda: default_may_goto())
    # --py-stacks: follow wakeups (Linux >= 5.15), so that a thread with no Python
    # frame borrows the stack of the waiting thread that handed it its work;
    # without, only that of the one Python thread waiting
    py_wakers: bool = field(default_factory=lambda: default_py_wakers())

    @property
    def links_per_process(self) -> bool:
        """Each target process gets uprobe_multi links of its own: per_process,
        where links are uprobe_multi (perf events are per library)."""
        return self.per_process and self.attach == "multi"

    def kept(self, probe: Probe) -> bool:
        """serve --duty: the probe's links stay in between slices (duty_exact)."""
        return probe.function.name in self.duty_exact


def probe_config(probe: Probe, kept: bool = False) -> tuple[int, ...]:
    """struct cp_probe_cfg for one probe: (nstack, cfg_slot, out8, out4, str_slot,
    nargs, nouts, size, func_slot, handle_slot, cfg_off, cfg_len, outer, kept);
    `kept`: its links stay in between serve --duty's slices (Settings.duty_exact)."""
    fn = probe.function
    func_slot = next((slot for arg, slot in zip(fn.args, fn.slots) if arg.kind is ArgKind.FUNC),
                     -1)
    handle_slot = next((slot for arg, slot in zip(fn.args, fn.slots)
                        if arg.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION)), -1)
    return (fn.stack_words, fn.config_slot, fn.out_mask(8), fn.out_mask(4), fn.string_slot,
            fn.words, len(fn.out_index), event.record_size(fn), func_slot, handle_slot,
            *fn.config_window, int(fn.api == NCCL), int(kept))


PAIR_BYTES = 8 << 20  # at most, for the per-thread pairing entries (`owned`)
PAIR_THREADS = 64  # thread slots at most (their tid modulo): a power of 2
# a pairing entry: the nesting count, then the call (struct cp_trace_entry,
# cp_stats_entry in bpf/cudaprobe.h)
ENTRY_SIZES = {"trace": 8 + event.EVENT_SIZE, "stats": 8 + 16}


def program(settings: Settings) -> str:
    """Which program the settings compile: "trace" or "stats"."""
    return "stats" if settings.stats else "trace"


def pair_threads(nprobes: int, entry_size: int) -> int:
    """Thread slots of the pairing array: PAIR_THREADS, or fewer (a power of 2,
    at least 1) where its entries, one per slot and probe, would pass PAIR_BYTES.
    CUDAPROBE_PAIR_THREADS=N (a power of 2, at most PAIR_THREADS) makes it N: with
    1, every thread but one pairs through the hash (tests use it)."""
    forced = os.environ.get("CUDAPROBE_PAIR_THREADS", "")
    if forced.isdigit() and 0 < int(forced) <= PAIR_THREADS and not int(forced) & (int(forced) - 1):
        return int(forced)
    n = PAIR_THREADS
    while n > 1 and n * nprobes * entry_size > PAIR_BYTES:
        n //= 2
    return n


def numbers(probes: list[Probe], settings: Settings) -> dict[str, int]:
    """The program's numeric settings: every one it uses, always (the C has no
    defaults)."""
    nprobes = max(1, len(probes))
    d = {
        "CP_MAX_INFLIGHT": settings.max_inflight,
        "CP_PAIR_THREADS": pair_threads(nprobes, ENTRY_SIZES[program(settings)]),
        "CP_NR_PROBES": nprobes,
        "CP_MAX_ERROR_CODES": nprobes * settings.error_codes_per_probe,
        "CP_MAX_TARGETS": settings.max_targets,
        "CP_MAX_LIBRARIES": settings.max_libraries,
    }
    if not settings.stats:
        d |= {
            "CP_RINGBUF_PAGES": settings.ringbuf_pages,
            "CP_WAKEUP_EVERY": settings.wakeup_every,
            "CP_MAX_PROCS": settings.max_procs,
            "CP_MAX_SITES": settings.max_sites,
            "CP_MAX_HANDLES": settings.max_handles,
            "CP_MAX_STACKS": settings.max_stacks,
        }
    if settings.py_stacks and not settings.stats:
        d |= {
            "CP_MAX_PY_PROCS": settings.max_py_procs,
            "CP_MAX_PY_EXES": settings.max_py_exes,
            "CP_MAX_PY_THREADS": settings.max_py_threads,
            "CP_MAX_PY_CODES": settings.max_py_codes,
            **task_offsets(),
        }
    return d


SAFEPOINT = "safepoint.bpf.c"  # the GPU-time injection's own program


def safepoint_numbers(settings: Settings) -> dict[str, int]:
    """bpf/safepoint.bpf.c's map sizes: every one it uses (the C has no defaults)."""
    return {"CP_MAX_RANGES": settings.max_safepoint_ranges,
            "CP_MAX_SEEN": settings.max_safepoint_threads,
            "CP_MAX_ARMED": settings.max_safepoint_armed,
            "CP_MAX_PROCS": settings.max_safepoint_procs}


def task_offsets() -> dict[str, int]:
    """The kernel struct offsets --py-stacks reads at (CP_OFF_*), from its BTF."""
    offsets = kernel_btf.task_offsets()
    if offsets is None:
        raise EnvironmentProblem(f"--py-stacks reads the kernel's task fields at offsets "
                                 f"that {kernel_btf.BTF_PATH} gives, and it is not there",
                                 fix="a kernel built with CONFIG_DEBUG_INFO_BTF")
    return offsets


def switches(probes: list[Probe], settings: Settings) -> dict[str, str]:
    """The program's switches, each only when on (the C tests it with #ifdef);
    CP_PROBES also lists the perf-event fallback's programs."""
    d = {}
    if settings.attach == "perf":
        d["CP_PROBES"] = " ".join(f"CP_PROBE({p.func_id})" for p in probes)
    if settings.filter_pid:
        d["CP_FILTER_PID"] = "1"
        if settings.filter_comm:
            d["CP_FILTER_COMM"] = "1"
        if settings.links_per_process:
            d["CP_PER_PROCESS"] = "1"  # a child is traced once its own links are in
    if settings.duty_exact:
        d["CP_DUTY"] = "1"  # serve --duty: an entry left by an earlier slice is let go
    if settings.errors_only:
        d["CP_ERRORS_ONLY"] = "1"
    if settings.stacks:
        d["CP_STACKS"] = "1"
    if settings.callers:
        d["CP_CALLER"] = "1"
    elif not settings.stats and any(p.function.api == NCCL for p in probes):
        d["CP_OUTER"] = "1"  # calls made inside an NCCL call say so (decode/nesting.py)
    if settings.py_stacks and not settings.stats:
        d["CP_PYSTACKS"] = "1"
        if settings.may_goto:
            d["CP_MAY_GOTO"] = "1"
        if settings.py_wakers:
            d["CP_PY_WAKERS"] = "1"
    # probes of functions that return no status (cudaGetErrorName's const char *):
    # what they return is no error, and is not read
    no_status = [p.func_id for p in probes if p.function.returns]
    if no_status:
        d["CP_NO_STATUS(id)"] = "(" + "||".join(f"(id)=={i}" for i in no_status) + ")"
    return d


def defines(probes: list[Probe], settings: Settings) -> dict[str, str]:
    """The program's -D settings: its numbers, then its switches."""
    return {**{k: str(v) for k, v in numbers(probes, settings).items()},
            **switches(probes, settings)}


def cflags(probes: list[Probe], settings: Settings) -> list[str]:
    return [f"-D{k}={v}" for k, v in defines(probes, settings).items()]


LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)".*$', re.M)


def inline_includes(text: str) -> str:
    """`text` with each `#include "X"` of bpf/ replaced by X's own text, inlined
    likewise: the program as the compiler reads it."""
    return LOCAL_INCLUDE.sub(
        lambda m: f"/* {m[1]} */\n" + inline_includes((bpf_dir() / m[1]).read_text()), text)


def source(settings: Settings) -> str:
    """The C that bcc compiles: the settings' program with bpf/'s headers inlined."""
    return inline_includes((bpf_dir() / PROGRAMS[program(settings)]).read_text())


def render(probes: list[Probe], settings: Settings) -> str:
    """The program exactly as compiled: the -D settings as #defines, then the
    source with bpf/'s headers inlined."""
    name = PROGRAMS[program(settings)]
    lines = [f"/* generated by cudaprobe --dump-bpf: the -D cflags, then bpf/{name} */"]
    for k, v in defines(probes, settings).items():
        if k == "CP_PROBES":
            v = " \\\n\t".join([""] + v.split(" "))
        lines.append(f"#define {k} {v}")
    src = source(settings)
    table = ["", "/* the `probes` map, as the loader fills it: "
                 "id: {nstack, cfg_slot, out8, out4, str_slot, nargs, nouts, size, "
                 "func_slot, handle_slot, cfg_off, cfg_len, outer, kept} */"]
    for p in probes:
        config = probe_config(p, settings.kept(p))
        table.append(f"/* {p.func_id:3d} {p.symbol}: {{{', '.join(map(str, config))}}} */")
    return "\n".join(lines) + "\n\n" + src + "\n".join(table) + "\n"
