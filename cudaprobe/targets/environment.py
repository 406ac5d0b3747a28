"""Making the machine ready for bcc: tracefs and kernel headers.

Uprobe-only BPF programs do not depend on the exact kernel's headers, so when
the running kernel has none (VMs, containers, custom kernels) we point
/lib/modules/$(uname -r)/{build,source} at the newest installed distro
headers, and say so in one line.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from dataclasses import dataclass

from cudaprobe.errors import EnvironmentProblem

TRACEFS = "/sys/kernel/tracing"
# x86-64 uretprobes return through the uretprobe() syscall from 6.11 on, which
# seccomp filters deny, killing the process with SIGSYS; 6.14 exempted it
URETPROBE_SYSCALL = ((6, 11), (6, 14))
HEADER_FLAVOURS = ("amd64", "generic", "cloud-amd64")


@dataclass(frozen=True)
class HeaderSource:
    build: str
    source: str
    exact: bool  # headers of the running kernel, not a fallback


def _modules_dir() -> str:
    return f"/lib/modules/{os.uname().release}"


def tracefs_mounted() -> bool:
    return os.path.ismount(TRACEFS) or os.path.isfile(os.path.join(TRACEFS, "uprobe_events"))


def ensure_tracefs() -> str | None:
    """Mount tracefs if it is missing; returns a note when it did."""
    if tracefs_mounted():
        return None
    try:
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", TRACEFS],
            check=True, capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        # mount(8) adds a second line pointing at dmesg: the first says what failed
        detail = (getattr(e, "stderr", "") or str(e)).strip().split("\n", 1)[0]
        raise EnvironmentProblem(
            f"tracefs is not mounted at {TRACEFS} and mounting it failed: {detail}",
            fix=f"mount -t tracefs nodev {TRACEFS}",
        ) from None
    return f"mounted tracefs at {TRACEFS}"


def _version_key(path: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", os.path.basename(path))]


def find_fallback_headers() -> HeaderSource | None:
    """The newest installed distro headers with both build and source trees."""
    candidates = []
    for flavour in HEADER_FLAVOURS:
        for build in glob.glob(f"/usr/src/linux-headers-*-{flavour}"):
            common = build[: -len(flavour)] + "common"
            source = common if os.path.isdir(common) else build
            if os.path.isfile(os.path.join(build, ".config")) or os.path.isdir(
                os.path.join(build, "include")
            ):
                candidates.append(HeaderSource(build, source, exact=False))
    if not candidates:
        return None
    return max(candidates, key=lambda h: _version_key(h.build))


def current_headers() -> HeaderSource | None:
    build = os.path.join(_modules_dir(), "build")
    if os.path.isdir(build):
        source = os.path.join(_modules_dir(), "source")
        real = os.path.realpath(build)
        exact = os.uname().release in os.path.basename(real)
        source = os.path.realpath(source) if os.path.isdir(source) else real
        return HeaderSource(real, source, exact)
    return None


def ensure_kernel_headers() -> str | None:
    """Make headers visible to bcc; returns a note when a fallback was set up."""
    if current_headers() is not None:
        return None
    if os.path.isfile("/sys/kernel/kheaders.tar.xz"):
        return None  # bcc unpacks CONFIG_IKHEADERS itself
    fallback = find_fallback_headers()
    if fallback is None:
        raise EnvironmentProblem(
            f"no kernel headers for {os.uname().release} and no distro headers to fall back on",
            fix="apt-get install linux-headers-amd64 (Debian) or linux-headers-generic (Ubuntu)",
        )
    mods = _modules_dir()
    try:
        os.makedirs(mods, exist_ok=True)
        for name, target in (("build", fallback.build), ("source", fallback.source)):
            link = os.path.join(mods, name)
            if os.path.islink(link):
                os.unlink(link)
            os.symlink(target, link)
    except OSError as e:
        raise EnvironmentProblem(
            f"cannot link fallback kernel headers into {mods}: {e.strerror}",
            fix=f"ln -s {fallback.build} {mods}/build; ln -s {fallback.source} {mods}/source",
        ) from None
    return (
        f"no headers for kernel {os.uname().release}: using {os.path.basename(fallback.build)} "
        f"(uprobes do not need exact headers)"
    )


def kernel_version(release: str | None = None) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release or os.uname().release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def status_field(name: str, pid: int | str = "self") -> str | None:
    """A field of /proc/PID/status, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def uretprobes_kill_filtered() -> bool:
    """True on kernels where a process under a seccomp filter is killed by SIGSYS
    when a uretprobe fires in it (x86-64, Linux 6.11 to 6.13 without the fix)."""
    low, high = URETPROBE_SYSCALL
    return os.uname().machine == "x86_64" and low <= kernel_version() < high


def seccomp_filtered(pid: int | str = "self") -> bool:
    return status_field("Seccomp", pid) == "2"


def filtered_processes() -> int:
    """Processes running under a seccomp filter now."""
    return sum(seccomp_filtered(pid) for pid in os.listdir("/proc") if pid.isdigit())


def seccomp_warning() -> str | None:
    """The hazard, said before tracing starts, where this kernel has it."""
    if not uretprobes_kill_filtered():
        return None
    return (f"WARNING: on Linux {os.uname().release} a traced process under a seccomp filter "
            f"is killed by SIGSYS when a probed call returns ({filtered_processes()} run under "
            "one now); `cudaprobe doctor` says what fixes it")
