"""The BPF program: bpf/cudaprobe.bpf.c plus settings passed as -D cflags."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from cudaprobe.catalogue.functions import ArgKind
from cudaprobe.errors import EnvironmentProblem
from cudaprobe.probe import event, kernel_btf, uprobe_multi
from cudaprobe.probe.plan import Probe

SOURCE_NAME = "cudaprobe.bpf.c"
HEADER_NAME = "cudaprobe.h"


def bpf_dir() -> Path:
    """bpf/ sources: shipped as package data, or the source tree's top-level bpf/."""
    package = Path(__file__).resolve().parent.parent  # cudaprobe/
    for candidate in (package / "bpf", package.parent / "bpf"):
        if (candidate / SOURCE_NAME).is_file():
            return candidate
    raise FileNotFoundError(f"{SOURCE_NAME} is not installed next to {package}")


ATTACH_MODES = ("multi", "perf")


def default_attach() -> str:
    """uprobe_multi where the kernel has it; CUDAPROBE_ATTACH=perf|multi overrides."""
    forced = os.environ.get("CUDAPROBE_ATTACH")
    if forced in ATTACH_MODES:
        return forced
    return "multi" if uprobe_multi.supported() else "perf"


@dataclass(frozen=True)
class Settings:
    ringbuf_pages: int = 4096  # 16 MiB with 4 KiB pages
    max_inflight: int = 16384  # pairing entries of threads without a slot (`inflight`)
    wakeup_every: int = 1024  # a forced reader wakeup every N records per CPU
    max_stacks: int = 16384  # user stacks kept (`stacks`, with stacks=True)
    filter_pid: bool = False
    filter_comm: bool = False  # with filter_pid: exec under the --comm name joins `targets`
    # uprobe_multi links per target process (--pid, -- COMMAND), so that other
    # processes mapping the library take no trap; else one link per library
    per_process: bool = False
    errors_only: bool = False
    stats: bool = False  # aggregate in the kernel (cudaprobe stats) instead of emitting events
    stacks: bool = False  # record user stacks (cudaprobe memory --stacks)
    callers: bool = False  # record each call's return address (cudaprobe memory)
    py_stacks: bool = False  # send each call's Python stack (--py-stacks; trace records only)
    # "multi": uprobe_multi links (Linux >= 6.6); "perf": one perf event per probe
    attach: str = field(default_factory=lambda: default_attach())


def probe_config(probe: Probe) -> tuple[int, ...]:
    """struct cp_probe_cfg for one probe: (nstack, cfg_slot, out8, out4, str_slot,
    nargs, nouts, size, func_slot, handle_slot, cfg_off, cfg_len)."""
    fn = probe.function
    func_slot = next((slot for arg, slot in zip(fn.args, fn.slots) if arg.kind is ArgKind.FUNC),
                     -1)
    handle_slot = next((slot for arg, slot in zip(fn.args, fn.slots)
                        if arg.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION)), -1)
    return (fn.stack_words, fn.config_slot, fn.out_mask(8), fn.out_mask(4), fn.string_slot,
            fn.words, len(fn.out_index), event.record_size(fn), func_slot, handle_slot,
            *fn.config_window)


PAIR_BYTES = 8 << 20  # at most, for the per-thread pairing entries (`owned`)
PAIR_THREADS = 64  # thread slots at most (their tid modulo): a power of 2
STAMP_SIZE = 24  # struct cp_stamp, what `stats` keeps per call


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


def defines(probes: list[Probe], settings: Settings) -> dict[str, str]:
    """The program's -D settings: every number always (the C has no defaults),
    each switch only when on (the C tests it with #ifdef)."""
    nprobes = max(1, len(probes))
    entry_size = STAMP_SIZE if settings.stats else event.EVENT_SIZE
    d = {
        "CP_RINGBUF_PAGES": str(settings.ringbuf_pages),
        "CP_MAX_INFLIGHT": str(settings.max_inflight),
        "CP_PAIR_THREADS": str(pair_threads(nprobes, entry_size)),
        "CP_NR_PROBES": str(nprobes),
        "CP_WAKEUP_EVERY": str(settings.wakeup_every),
        "CP_MAX_STACKS": str(settings.max_stacks),
    }
    if settings.attach == "perf":
        d["CP_PROBES"] = " ".join(f"CP_PROBE({p.func_id})" for p in probes)
    if settings.filter_pid:
        d["CP_FILTER_PID"] = "1"
        if settings.filter_comm:
            d["CP_FILTER_COMM"] = "1"
    if settings.errors_only:
        d["CP_ERRORS_ONLY"] = "1"
    if settings.stats:
        d["CP_STATS"] = "1"
    if settings.stacks:
        d["CP_STACKS"] = "1"
    if settings.callers:
        d["CP_CALLER"] = "1"
    if settings.py_stacks and not settings.stats:
        d["CP_PYSTACKS"] = "1"
        offsets = kernel_btf.task_offsets()
        if offsets is None:
            raise EnvironmentProblem(f"--py-stacks reads the kernel's task fields at offsets "
                                     f"that {kernel_btf.BTF_PATH} gives, and it is not there",
                                     fix="a kernel built with CONFIG_DEBUG_INFO_BTF")
        d.update({k: str(v) for k, v in offsets.items()})
    return d


def cflags(probes: list[Probe], settings: Settings) -> list[str]:
    return [f"-I{bpf_dir()}"] + [f"-D{k}={v}" for k, v in defines(probes, settings).items()]


def source_path() -> str:
    return str(bpf_dir() / SOURCE_NAME)


LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+\.bpf\.h)"$', re.M)


def source_text() -> str:
    """The program's text with its bpf/*.bpf.h includes inlined: bcc rewrites
    map calls (`m.lookup(&k)`) only in the text it is given."""
    return LOCAL_INCLUDE.sub(lambda m: (bpf_dir() / m[1]).read_text(),
                             (bpf_dir() / SOURCE_NAME).read_text())


def render(probes: list[Probe], settings: Settings) -> str:
    """The program exactly as compiled: the -D settings as #defines, then the source."""
    lines = ["/* generated by cudaprobe --dump-bpf: the -D cflags, then bpf/cudaprobe.bpf.c */"]
    for k, v in defines(probes, settings).items():
        if k == "CP_PROBES":
            v = " \\\n\t".join([""] + v.split(" "))
        lines.append(f"#define {k} {v}")
    src = (bpf_dir() / SOURCE_NAME).read_text()
    header = (bpf_dir() / HEADER_NAME).read_text()
    src = src.replace(f'#include "{HEADER_NAME}"', f"/* {HEADER_NAME} */\n{header}")
    table = ["", "/* the `probes` map, as the loader fills it: "
                 "id: {nstack, cfg_slot, out8, out4, str_slot, nargs, nouts, size, "
                 "func_slot, handle_slot, cfg_off, cfg_len} */"]
    table += [f"/* {p.func_id:3d} {p.symbol}: {{{', '.join(map(str, probe_config(p)))}}} */"
              for p in probes]
    return "\n".join(lines) + "\n\n" + src + "\n".join(table) + "\n"
