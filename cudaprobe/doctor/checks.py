"""Will tracing work on this machine, and if not, what to do about it.

Each check returns a Check: what was found and, when it is not fine, the
fix. A FAIL means `cudaprobe trace` will not work; a WARN does not stop it.
Nothing on the machine is changed: tracefs is not mounted and no headers are
linked here (`cudaprobe trace` does both, and says so).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from cudaprobe.catalogue.count import count_text
from cudaprobe.catalogue.functions import APIS, FUNCTIONS
from cudaprobe.errors import CudaprobeError
from cudaprobe.probe import bpfprog, sweep, uprobe_multi
from cudaprobe.targets import cupti, environment, injectable
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.libs import api_of, discover_libraries, resolve_lib_arg

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_KERNEL = (5, 8)  # BPF ring buffer
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
KERNEL_CONFIG = ("CONFIG_BPF_SYSCALL", "CONFIG_PERF_EVENTS", "CONFIG_UPROBES",
                 "CONFIG_UPROBE_EVENTS", "CONFIG_BPF_EVENTS")
BCC_TESTED = (0, 26)


@dataclass
class Check:
    name: str
    status: str
    found: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # more, for --json


def check_privileges() -> Check:
    caps = int(environment.status_field("CapEff") or "0", 16)
    have = [name for name, bit in (("CAP_BPF", CAP_BPF), ("CAP_PERFMON", CAP_PERFMON),
                                   ("CAP_SYS_ADMIN", CAP_SYS_ADMIN)) if caps >> bit & 1]
    euid = os.geteuid()
    if euid != 0:
        return Check("privileges", FAIL, f"uid {euid}, not root", "run it with sudo")
    if caps >> CAP_SYS_ADMIN & 1 or {"CAP_BPF", "CAP_PERFMON"} <= set(have):
        return Check("privileges", OK, f"root, with {', '.join(have)}")
    return Check("privileges", FAIL, "root, but without CAP_BPF and CAP_PERFMON (or "
                 "CAP_SYS_ADMIN): a container that drops them",
                 "run the container with --cap-add BPF --cap-add PERFMON --cap-add SYS_ADMIN")


def check_kernel() -> Check:
    u = os.uname()
    found = f"Linux {u.release} on {u.machine}"
    if u.machine != "x86_64":
        return Check("kernel", FAIL, found, "cudaprobe reads x86-64 registers and ELF: "
                     "run it on x86-64")
    if environment.kernel_version() < MIN_KERNEL:
        return Check("kernel", FAIL, found, "the BPF ring buffer needs Linux 5.8 or newer")
    return Check("kernel", OK, found)


def read_kernel_config() -> tuple[str | None, dict[str, str]]:
    """(where it was read, CONFIG_X -> value) from /proc/config.gz or /boot."""
    release = os.uname().release
    for path in ("/proc/config.gz", f"/boot/config-{release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                text = f.read()
        except OSError:
            continue
        return path, dict(re.findall(r"^(CONFIG_\w+)=(.*)$", text, re.M))
    return None, {}


def check_kernel_config() -> Check:
    where, config = read_kernel_config()
    if where is None:
        # no config to read: probe for what shows from outside
        probes = {"uprobe PMU": os.path.isdir("/sys/bus/event_source/devices/uprobe"),
                  "bpf() syscall": os.path.exists("/proc/sys/kernel/unprivileged_bpf_disabled")}
        missing = [k for k, ok in probes.items() if not ok]
        if missing:
            return Check("kernel config", FAIL, f"no /proc/config.gz or /boot/config; "
                         f"missing: {', '.join(missing)}",
                         "a kernel with " + ", ".join(f"{k}=y" for k in KERNEL_CONFIG))
        return Check("kernel config", WARN, "no /proc/config.gz or /boot/config; the uprobe "
                     "PMU and the bpf() syscall are there",
                     "CONFIG_IKCONFIG_PROC=y would let this be checked")
    missing = [k for k in KERNEL_CONFIG if config.get(k) != "y"]
    if missing:
        return Check("kernel config", FAIL, f"{where}: {', '.join(missing)} not set",
                     "a kernel built with " + ", ".join(f"{k}=y" for k in missing))
    return Check("kernel config", OK, f"{where}: {', '.join(k[7:] for k in KERNEL_CONFIG)}")


def check_btf() -> Check:
    if os.path.isfile("/sys/kernel/btf/vmlinux"):
        return Check("BTF", OK, "/sys/kernel/btf/vmlinux")
    return Check("BTF", WARN, "no /sys/kernel/btf/vmlinux: cudaprobe does not need it, "
                 "bpftrace and CO-RE tools do", "a kernel built with CONFIG_DEBUG_INFO_BTF=y")


def check_tracefs() -> Check:
    if environment.tracefs_mounted():
        return Check("tracefs", OK, f"mounted at {environment.TRACEFS}")
    mount = f"mount -t tracefs nodev {environment.TRACEFS}"
    try:
        with open("/proc/filesystems") as f:
            known = "tracefs" in f.read()
    except OSError:
        known = False
    if known and os.path.isdir(environment.TRACEFS):
        return Check("tracefs", WARN, "not mounted: `cudaprobe trace` mounts it", mount)
    return Check("tracefs", FAIL, "not mounted, and cannot be: " + (
        f"no {environment.TRACEFS} directory" if known else "the kernel has no tracefs"), mount)


def check_headers() -> Check:
    release = os.uname().release
    current = environment.current_headers()
    if current is not None and current.exact:
        return Check("kernel headers", OK, f"exact: {current.build}")
    if current is not None:
        return Check("kernel headers", OK, f"fallback: {current.build} for {release} "
                     "(uprobes do not need exact headers)")
    if os.path.isfile("/sys/kernel/kheaders.tar.xz"):
        return Check("kernel headers", OK, "built into the kernel (CONFIG_IKHEADERS)")
    fallback = environment.find_fallback_headers()
    if fallback is not None:
        return Check("kernel headers", WARN, f"none for {release}: `cudaprobe trace` links "
                     f"{fallback.build}")
    return Check("kernel headers", FAIL, f"none for {release}, and no distro headers to fall "
                 "back on", "apt-get install linux-headers-amd64 (Debian) or "
                 "linux-headers-generic (Ubuntu)")


def check_bcc() -> Check:
    from cudaprobe.probe.load import import_bcc  # noqa: PLC0415 - load imports bcc's helpers lazily too

    try:
        bcc = import_bcc()
    except CudaprobeError as e:
        return Check("bcc", FAIL, e.message, e.fix or "")
    version = getattr(bcc, "__version__", "unknown")
    found = f"{version} ({os.path.dirname(bcc.__file__)})"
    numbers = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if numbers and numbers < BCC_TESTED:
        return Check("bcc", WARN, found + ": older than 0.26, the oldest tested",
                     "apt-get install python3-bpfcc from a newer release")
    return Check("bcc", OK, found)


def check_bpftrace() -> Check:
    path = shutil.which("bpftrace")
    if path is None:
        return Check("bpftrace", WARN, "not installed: needed only to run scripts from "
                     "`cudaprobe export bpftrace`", "apt-get install bpftrace")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                             check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("bpftrace", WARN, f"{path} does not run: {e}", "reinstall bpftrace")
    return Check("bpftrace", OK, f"{out or 'unknown version'} ({path})")


def check_gpu_time() -> Check:
    """--gpu-time: its library (shipped with cudaprobe, cached, or to be built
    from the CUDA headers), a libcupti to record through, and ptrace for the
    processes it is put into while they run. Never a failure: tracing works
    without GPU time."""
    library, why = gpu_time_library()
    libcupti = cupti.cupti_library()
    details = {"library": library or "", "why_not": why, "libcupti": libcupti}
    scope = injectable.yama_scope()
    said = [library or f"no library: {why}",
            f"libcupti {libcupti}" if libcupti else "no libcupti of the toolkit (a process's own "
            "is used where it maps one: PyTorch does)"]
    if scope == "3":
        said.append("ptrace disabled (Yama ptrace_scope 3): not into running processes")
        return Check("GPU time", WARN, "; ".join(said), "set kernel.yama.ptrace_scope below 3 "
                     "(--pid, --comm and serve on a node put the library in with ptrace)",
                     details)
    if library is None:
        return Check("GPU time", WARN, "; ".join(said), "install the CUDA toolkit's headers "
                     "(CUDA_HOME/include/cupti.h), or use an image built with them", details)
    return Check("GPU time", OK, "; ".join(said), details=details)


def gpu_time_library() -> tuple[str | None, str]:
    """Where --gpu-time's library is, or will be built at its first use; or
    (None, why not). Nothing is built here."""
    shipped = cupti.shipped_library()
    if shipped is not None:
        return f"shipped with cudaprobe ({shipped})", ""
    path, why = cupti.library_path()
    if path is None:
        return None, why
    if cupti.cached_library_intact(path):
        return f"built ({path})", ""
    return f"to be built at its first use, into {path.parent}", ""


def check_attach_mode() -> Check:
    mode = bpfprog.default_attach()
    forced = os.environ.get("CUDAPROBE_ATTACH") in bpfprog.ATTACH_MODES
    how = " (CUDAPROBE_ATTACH)" if forced else ""
    if mode == "multi":
        return Check("attach", OK, f"uprobe_multi links{how}: one per library, detached in 0.1 s")
    why = how or " (Linux < 6.6 has no uprobe_multi)"
    status = OK if forced and uprobe_multi.supported() else WARN
    return Check("attach", status, f"one perf event per probe{why}: attaching takes longer and "
                 "detaching 0.1 s per probe, finished in the background after exit",
                 "" if status == OK else "Linux 6.6 or newer")


def check_pid_namespace() -> Check:
    if sweep.host_pids_visible():
        return Check("pid namespace", OK, "the host's: calls of threads that exit mid-call "
                     "are swept from the pairing map")
    return Check("pid namespace", WARN, "one of its own: events carry host pids, which this "
                 "/proc does not show, so -- COMMAND, --pid and --comm cannot select "
                 "processes (they say so and exit 2; tracing every process with --lib works), "
                 "and calls of threads that exit mid-call stay in the pairing map "
                 f"({bpfprog.Settings.max_inflight} entries) until the trace ends",
                 "run cudaprobe in the host's pid namespace (docker run --pid=host)")


def in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        with open("/proc/1/environ", "rb") as f:
            if b"container=" in f.read():
                return True
        with open("/proc/1/cgroup") as f:
            return bool(re.search(r"docker|kubepods|containerd|libpod|lxc", f.read()))
    except OSError:
        return False


def check_uretprobe_seccomp() -> Check:
    name = "uretprobe + seccomp"
    release = os.uname().release
    if not environment.uretprobes_kill_filtered():
        return Check(name, OK, f"Linux {release} is not affected (6.11 to 6.13 are)")
    fix = ("Linux 6.14+, or a stable kernel with \"seccomp: passthrough uretprobe system call "
           "without filtering\"; else run traced containers with seccomp=unconfined")
    hazard = (f"on Linux {release} a process under a seccomp filter is killed by SIGSYS when "
              "a traced call returns")
    if environment.seccomp_filtered():
        return Check(name, FAIL, hazard + ": cudaprobe runs under one, and so would "
                     "-- COMMAND", fix)
    where = "in a container" if in_container() else "on the host"
    filtered = environment.filtered_processes()
    return Check(name, WARN, f"{hazard}; {filtered} processes {where} run under one now "
                 "(containers, systemd SystemCallFilter=)", fix)


def _version_of(path: str) -> str:
    name = os.path.basename(os.path.realpath(path))
    return name.split(".so.", 1)[1] if ".so." in name else "unknown"


def check_cuda(libs: list[str] | None) -> list[Check]:
    try:
        paths = sorted({p for arg in libs for p in resolve_lib_arg(arg)}) if libs else (
            discover_libraries(set(APIS)))
    except CudaprobeError as e:
        return [Check("CUDA library", FAIL, e.message, "give --lib a libcudart or libcuda")]
    if not paths:
        return [Check("CUDA library", WARN, "none found in the ld.so cache, /usr/local/cuda*, "
                      "$CUDA_HOME or pip's nvidia/* packages",
                      "name one with --lib, or trace a process with --pid (what it maps is "
                      "found)")]
    return [_check_library(p, named=bool(libs)) for p in paths]


def _check_library(path: str, named: bool = False) -> Check:
    """One library's functions; one named by --lib that defines none fails:
    tracing it would trace nothing."""
    try:
        symbols = read_symbols(path).functions
    except CudaprobeError as e:
        return Check("CUDA library", FAIL, e.message, "give --lib a libcudart or libcuda")
    api = api_of(path)
    wanted = [f for f in FUNCTIONS if api is None or f.api == api]
    found = [f.name for f in wanted if any(s in symbols for s in f.symbols)]
    missing = [f.name for f in wanted if f.name not in found]
    # counted as `cudaprobe list` counts them: catalogue entries, and their symbols
    all_symbols = [s for f in wanted for s in f.symbols]
    defined = [s for s in all_symbols if s in symbols]
    details = {"path": path, "api": api, "version": _version_of(path),
               "functions": found, "missing": missing,
               "symbols": {"catalogue": len(all_symbols), "exported": len(defined)}}
    text = (f"{path}: {api or 'unknown API'} {details['version']}, "
            f"{count_text(found, defined)} (of {len(wanted)} catalogue functions)")
    if not found:
        return Check("CUDA library", FAIL if named else WARN, text,
                     "not a CUDA runtime or driver library: give --lib a libcudart, libcuda "
                     "or libnccl" if named else "not a CUDA runtime or driver library?", details)
    if missing:
        text += f" (missing: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''})"
    return Check("CUDA library", OK, text, details=details)


def run_checks(libs: list[str] | None = None) -> list[Check]:
    return [check_privileges(), check_kernel(), check_kernel_config(), check_btf(),
            check_tracefs(), check_headers(), check_bcc(), check_bpftrace(),
            check_attach_mode(), check_pid_namespace(), check_uretprobe_seccomp(),
            check_gpu_time(), *check_cuda(libs)]


def tracing_works(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)


def to_json(checks: list[Check]) -> dict[str, Any]:
    return {"tracing_works": tracing_works(checks), "checks": [asdict(c) for c in checks]}
