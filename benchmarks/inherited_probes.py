"""What perf-event uprobes that a fork inherits would cost a traced process:
the way to trace a child forked without exec from its first instruction
(docs/attach.md, "Known limits"). A perf event opened on a thread with
`inherit` is copied by the kernel into every thread and child that thread
makes, before it runs; so each probe needs one event per thread.

Makes EVENTS uprobe events (tracefs) on libcudart, opens each with
`inherit` on a process of one thread, then has that process make THREADS
threads, and reports the kernel memory (Slab) and the time that took,
against the same with no event. Then, with one event and its BPF program
attached through a second, non-inherited event of this process (an anchor),
forks CHILDREN children that each call the probed function CALLS times at
once, and counts their calls by the program: without the anchor, the
kernel takes the program off the probe when the first child that inherited
the event exits (a child's copy holds it too), and later children count
nothing.

    sudo python benchmarks/inherited_probes.py [--threads 200] [--events 0,100,400]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import struct
import subprocess
import tempfile
import time
from pathlib import Path

TRACEFS = "/sys/kernel/tracing"
LIB = "/usr/local/cuda/lib64/libcudart.so.13"
PERF_TYPE_TRACEPOINT, PERF_FLAG_FD_CLOEXEC, SYS_PERF_EVENT_OPEN = 2, 8, 298
PERF_EVENT_IOC_SET_BPF, PERF_EVENT_IOC_ENABLE = 0x40042408, 0x2400
libc = ctypes.CDLL(None, use_errno=True)

THREADS_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *sleeper(void *a) { pause(); return a; }
int main(int argc, char **argv) {
  char b; pthread_t t;
  if (read(0, &b, 1) != 1) return 9;
  for (int i = 0; i < atoi(argv[1]); i++) pthread_create(&t, NULL, sleeper, NULL);
  puts("made"); fflush(stdout);
  return read(0, &b, 1) < 0;
}
"""
FORKER_C = r"""
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
  int k = atoi(argv[1]), n = atoi(argv[2]); void *p; char b;
  if (read(0, &b, 1) != 1) return 9;
  for (int c = 0; c < k; c++)
    if (fork() == 0) { for (int i = 0; i < n; i++) cudaMalloc(&p, 1); _exit(0); }
  while (wait(NULL) > 0) ;
  return 0;
}
"""


def symbol_offset(name: str) -> int:
    from cudaprobe.targets.elfsyms import read_symbols  # noqa: PLC0415
    return read_symbols(LIB).vaddrs[name]  # a shared library: its offset in the file


def perf_open(event_id: int, pid: int, inherit: bool) -> int:
    attr = bytearray(128)
    struct.pack_into("IIQQ", attr, 0, PERF_TYPE_TRACEPOINT, 128, event_id, 1)
    struct.pack_into("Q", attr, 40, 2 if inherit else 0)  # the `inherit` bit
    struct.pack_into("I", attr, 48, 1)
    fd = libc.syscall(SYS_PERF_EVENT_OPEN, ctypes.create_string_buffer(bytes(attr), 128), pid,
                      -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "perf_event_open")
    return fd


class UprobeEvents:
    """EVENTS uprobe events on the library (removed by close())."""

    def __init__(self, offsets: list[int]) -> None:
        self.group = f"cpinherit_{os.getpid()}"
        self.lib = os.open(LIB, os.O_RDONLY)
        self.control = os.open(f"{TRACEFS}/uprobe_events", os.O_WRONLY | os.O_APPEND)
        self.ids: list[int] = []
        for i, offset in enumerate(offsets):
            os.write(self.control, f"p:{self.group}/e{i} /proc/self/fd/{self.lib}:{offset:#x}\n"
                     .encode())
            self.ids.append(int(Path(f"{TRACEFS}/events/{self.group}/e{i}/id").read_text()))

    def close(self) -> None:
        for i in range(len(self.ids)):
            os.write(self.control, f"-:{self.group}/e{i}\n".encode())
        os.close(self.control)
        os.close(self.lib)


def slab_kb() -> int:
    return next(int(line.split()[1]) for line in open("/proc/meminfo")
                if line.startswith("Slab:"))


def thread_cost(program: str, threads: int, events: int, start: int) -> tuple[int, float]:
    probes = UprobeEvents([start + 16 * i for i in range(events)])
    proc = subprocess.Popen([program, str(threads)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    fds = []
    try:
        fds = [perf_open(i, proc.pid, inherit=True) for i in probes.ids]
        time.sleep(0.3)
        before, began = slab_kb(), time.monotonic()
        proc.stdin.write(b"x")
        proc.stdin.flush()
        proc.stdout.readline()
        took = time.monotonic() - began
        time.sleep(0.5)
        return slab_kb() - before, took
    finally:
        proc.stdin.close()
        proc.wait()
        for fd in fds:
            os.close(fd)
        probes.close()


def children_counted(program: str, children: int, calls: int, start: int,
                     anchor: bool) -> dict[int, int]:
    from bcc import BPF  # noqa: PLC0415
    bpf = BPF(text="""BPF_HASH(counts, u32, u64);
int on_call(struct pt_regs *ctx) {
  u32 tgid = bpf_get_current_pid_tgid() >> 32; u64 zero = 0;
  u64 *c = counts.lookup_or_try_init(&tgid, &zero);
  if (c) __sync_fetch_and_add(c, 1);
  return 0;
}""")
    prog = bpf.load_func(b"on_call", BPF.KPROBE)
    probes = UprobeEvents([start])
    proc = subprocess.Popen([program, str(children), str(calls)], stdin=subprocess.PIPE)
    fds = []
    try:
        fds.append(perf_open(probes.ids[0], proc.pid, inherit=True))
        holder = fds[0]
        if anchor:  # on this process, which never maps the library: no breakpoint here
            fds.append(perf_open(probes.ids[0], os.getpid(), inherit=False))
            holder = fds[1]
        if libc.ioctl(holder, PERF_EVENT_IOC_SET_BPF, prog.fd) or \
                libc.ioctl(fds[0], PERF_EVENT_IOC_ENABLE, 0):
            raise OSError(ctypes.get_errno(), "ioctl")
        proc.stdin.write(b"x")
        proc.stdin.close()
        proc.wait()
        return {k.value: v.value for k, v in bpf["counts"].items()}
    finally:
        for fd in fds:
            os.close(fd)
        probes.close()
        bpf.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=200)
    ap.add_argument("--events", default="0,100,400")
    ap.add_argument("--children", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    start = symbol_offset("cudaMalloc")
    with tempfile.TemporaryDirectory() as d:
        threads, forker = f"{d}/threads", f"{d}/forker"
        Path(f"{d}/threads.c").write_text(THREADS_C)
        Path(f"{d}/forker.c").write_text(FORKER_C)
        subprocess.run(["gcc", "-O2", "-o", threads, f"{d}/threads.c", "-lpthread"], check=True)
        cuda = "/usr/local/cuda"
        subprocess.run(["gcc", "-O2", "-o", forker, f"{d}/forker.c", f"-I{cuda}/include",
                        f"-L{cuda}/lib64", "-lcudart", f"-Wl,-rpath,{cuda}/lib64"], check=True)
        for events in map(int, a.events.split(",")):
            kb, took = thread_cost(threads, a.threads, events, start)
            print(f"{a.threads} threads made with {events} inherited events each: "
                  f"kernel slab +{kb} kB, {took * 1000:.1f} ms")
        for anchor in (False, True):
            counts = children_counted(forker, a.children, a.calls, start, anchor)
            print(f"{a.children} forked children x {a.calls} calls, the program "
                  f"{'held by an anchor event' if anchor else 'on the inherited event'}: "
                  f"{sorted(counts.values())} counted")


if __name__ == "__main__":
    main()
