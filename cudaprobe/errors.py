"""One error hierarchy: every failure a user can cause or meet.

The CLI prints `cudaprobe: <message>` on stderr and exits with `exit_code`
(traceback only with -v). Each error carries what the user needs to fix it.
"""

from __future__ import annotations


class CudaprobeError(Exception):
    """Base class; `str()` is the one line shown to the user."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} ({self.fix})" if self.fix else self.message


class NotRoot(CudaprobeError):
    def __init__(self, what: str = "tracing") -> None:
        super().__init__(
            f"{what} needs root (CAP_BPF and CAP_PERFMON)", fix="run it with sudo"
        )


class BccMissing(CudaprobeError):
    def __init__(self, detail: str) -> None:
        super().__init__(
            f"the bcc Python module is not importable: {detail}",
            fix="apt-get install python3-bpfcc bpfcc-tools, and run cudaprobe with the "
            "system python3 or a venv made with --system-site-packages",
        )


class LibraryNotFound(CudaprobeError):
    def __init__(self, path: str, why: str = "no such file") -> None:
        super().__init__(f"CUDA library {path!r}: {why}")
        self.path = path


class SymbolMissing(CudaprobeError):
    def __init__(self, where: str, wanted: list[str]) -> None:
        shown = ", ".join(wanted[:5]) + (" ..." if len(wanted) > 5 else "")
        super().__init__(f"{where} defines none of the selected functions ({shown})")


class UnknownEvent(CudaprobeError):
    def __init__(self, name: str, suggestions: list[str]) -> None:
        hint = f"did you mean {', '.join(suggestions)}?" if suggestions else None
        super().__init__(
            f"unknown event or category {name!r}",
            fix=hint or "see `cudaprobe list` for functions and categories",
        )


class ProcessGone(CudaprobeError):
    def __init__(self, pid: int, why: str = "no such process") -> None:
        super().__init__(f"pid {pid}: {why}")
        self.pid = pid


class SeccompHazard(CudaprobeError):
    """A --pid target that this kernel's uretprobes would kill."""

    def __init__(self, pid: int, name: str, release: str) -> None:
        super().__init__(
            f"pid {pid} ({name}) runs under a seccomp filter: on Linux {release} it would be "
            "killed by SIGSYS when a probed call returns, so it is not traced (Linux 6.14+ "
            "fixes it; see `cudaprobe doctor`)")
        self.pid = pid


class OtherPidNamespace(CudaprobeError):
    """cudaprobe in a pid namespace of its own: the probes see the host's pids."""

    def __init__(self) -> None:
        super().__init__(
            "cudaprobe runs in a pid namespace other than the host's (a container without "
            "the host's pids): the probes see host pids, which it cannot match to the pids it "
            "sees, so -- COMMAND, --pid and --comm cannot select processes from here",
            fix="run it with the host's pids (docker run --pid=host, hostPID: true in "
                "Kubernetes), or trace every process using the library with --lib")


class CudaNotMapped(CudaprobeError):
    """--pid targets that map no object defining a traced function."""

    # named in the message, where selected, before the count of the rest
    LANDMARKS = ("cudaLaunchKernel", "cudaMalloc", "cuLaunchKernel", "cuMemAlloc_v2")

    def __init__(self, processes: str, files: int, symbols: list[str], note: str = "") -> None:
        shown = [s for s in self.LANDMARKS if s in symbols] or symbols[:3]
        super().__init__(
            f"{processes} not using CUDA: none of the {files} files mapped defines "
            f"{', '.join(shown)} or any other of the {len(symbols)} traced symbols "
            f"(as libcudart, libcuda, or a runtime linked in statically would){note}",
            fix="add --wait to attach when it loads CUDA",
        )


class CommandNotFound(CudaprobeError):
    def __init__(self, command: str, why: str | None = None) -> None:
        super().__init__(f"cannot run {command!r}: {why}" if why else
                         f"command not found: {command!r}")


class OutputError(CudaprobeError):
    pass


class OutputFailed(CudaprobeError):
    """Writing the output failed while running (disk full, EIO, reader gone):
    exit 1, as a run that went wrong rather than bad input. The CLI exits
    quietly for EPIPE, the way a pipe's reader says it has seen enough."""

    exit_code = 1

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class UsageError(CudaprobeError):
    pass


class BpfError(CudaprobeError):
    """bcc failed to compile, load or attach; translated from bcc's bare Exception."""

    def __init__(self, what: str, detail: str, fix: str | None = None) -> None:
        detail = " ".join(detail.split())
        if len(detail) > 300:
            detail = detail[:300] + "..."
        super().__init__(f"{what}: {detail}", fix=fix)


class EnvironmentProblem(CudaprobeError):
    pass
