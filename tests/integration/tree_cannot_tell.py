"""What a process tree can see of being traced, printed as one JSON line, for
test_whole_tree.py to compare traced and untraced.

The parent counts the SIGCHLD it gets, forks children that load libcudart
(the open cudaprobe holds) and call it, and reaps them with
waitpid(WUNTRACED | WCONTINUED): every status is recorded, so a stop or a
continue would show. One child is attached by the parent as a debugger
would (PTRACE_SEIZE, then detached) after its load, while it waits on a pipe.

    python tree_cannot_tell.py LIBCUDART
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

PTRACE_DETACH, PTRACE_SEIZE = 17, 0x4206
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def child(lib: str, status: int, wait_fd: int | None, ready_fd: int | None) -> None:
    cudart = ctypes.CDLL(lib)
    count = ctypes.c_int(-1)
    ret = cudart.cudaGetDeviceCount(ctypes.byref(count))
    if ready_fd is not None:
        os.write(ready_fd, b"x")
    if wait_fd is not None:
        os.read(wait_fd, 1)
    os._exit(status + (ret != 35))  # 35: no driver, as expected here


def statuses(pid: int) -> list[str]:
    seen = []
    while True:
        _, st = os.waitpid(pid, os.WUNTRACED | os.WCONTINUED)
        if os.WIFSTOPPED(st):
            seen.append(f"stopped {os.WSTOPSIG(st)}")
        elif os.WIFCONTINUED(st):
            seen.append("continued")
        elif os.WIFEXITED(st):
            return seen + [f"exited {os.WEXITSTATUS(st)}"]
        else:
            return seen + [f"killed {os.WTERMSIG(st)}"]


def main() -> None:
    lib = sys.argv[1]
    sigchld = []
    signal.signal(signal.SIGCHLD, lambda *_: sigchld.append(1))
    report: dict = {}
    for status in (3, 4):
        pid = os.fork()
        if pid == 0:
            child(lib, status, None, None)
        report[f"child {status}"] = statuses(pid)
    # a debugger attaches to a child that has loaded the library
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child(lib, 5, go_r, ready_w)
    os.read(ready_r, 1)
    seized = libc.ptrace(PTRACE_SEIZE, pid, None, None)
    report["ptrace seize"] = "ok" if seized == 0 else os.strerror(ctypes.get_errno())
    if seized == 0:
        libc.ptrace(PTRACE_DETACH, pid, None, None)
    os.write(go_w, b"x")
    report["child 5"] = statuses(pid)
    report["SIGCHLD"] = len(sigchld)
    print(json.dumps(report, sort_keys=True))
    sys.exit(6)


if __name__ == "__main__":
    main()
