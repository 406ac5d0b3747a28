"""--gpu-time without a GPU: the library's record layout against its Python
mirror, the library's own writer (cupti/gputime.c, CUPTI faked) read back,
the reader on files cut mid-record and on CUPTI's own clock, and the join of
GPU work to the traced calls."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cudaprobe.decode import gputime
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import RECORD, GpuReader, GpuWork, gpu_object, join
from cudaprobe.targets import cupti
from cudaprobe.targets.cupti import cuda_home, cupti_source_dir

from ..conftest import WORKLOADS

LAYOUT_PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include "gputime.h"
#define H(name) printf("h.%s %zu\n", #name, offsetof(struct gputime_header, name));
#define R(name) printf("r.%s %zu\n", #name, offsetof(struct gputime_record, name));
int main(void) {
    printf("header %zu\nrecord %zu\n", sizeof(struct gputime_header),
           sizeof(struct gputime_record));
    H(magic) H(version) H(pid) H(clock) H(record_size) H(realtime_to_monotonic_ns) H(system_tids)
    H(api_records)
    R(type) R(size) R(correlation) R(start) R(end) R(bytes) R(device) R(context) R(stream)
    R(tid) R(cbid) R(name_id) R(domain) R(copy_kind)
    printf("KERNEL %d\nMEMCPY %d\nMEMSET %d\nAPI %d\nNAME %d\nFUNCTION %d\nSTATUS %d\n"
           "DROPPED %d\nVERSION %d\nAPI_UNKNOWN %d\nAPI_SELECTED %d\nAPI_ALL %d\n",
           GPUTIME_KERNEL, GPUTIME_MEMCPY, GPUTIME_MEMSET, GPUTIME_API, GPUTIME_NAME,
           GPUTIME_FUNCTION, GPUTIME_STATUS, GPUTIME_DROPPED, GPUTIME_VERSION,
           GPUTIME_API_UNKNOWN, GPUTIME_API_SELECTED, GPUTIME_API_ALL);
    return 0;
}
"""


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def test_layout_matches_header(tmp_path):
    (tmp_path / "probe.c").write_text(LAYOUT_PROBE)
    subprocess.run([_cc(), f"-I{cupti_source_dir()}", "-o", str(tmp_path / "probe"),
                    str(tmp_path / "probe.c")], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "probe")], check=True, capture_output=True,
                         text=True).stdout
    c = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert c["header"] == gputime.HEADER.size and c["record"] == RECORD.size
    for name, offset in gputime.HEADER_OFFSETS.items():
        assert c[f"h.{name}"] == offset, name
    for name, offset in gputime.RECORD_OFFSETS.items():
        assert c[f"r.{name}"] == offset, name
    for name in ("KERNEL", "MEMCPY", "MEMSET", "API", "NAME", "FUNCTION", "STATUS", "DROPPED",
                 "VERSION", "API_UNKNOWN", "API_SELECTED", "API_ALL"):
        assert c[name] == getattr(gputime, name), name


@pytest.fixture(scope="module")
def writer(tmp_path_factory) -> Path:
    """tests/workloads/gputime_writer.c built: the library's own code, CUPTI faked."""
    if not (cuda_home() / "include" / "cupti.h").is_file():
        pytest.skip("no CUPTI headers")
    exe = tmp_path_factory.mktemp("writer") / "writer"
    subprocess.run([_cc(), "-O1", f"-I{cupti_source_dir()}", f"-I{cuda_home()}/include",
                    "-o", str(exe), str(WORKLOADS / "gputime_writer.c"), "-ldl", "-lpthread"],
                   check=True, capture_output=True)
    return exe


def _run_writer(exe: Path, out: Path, *args: str) -> tuple[GpuReader, list[str]]:
    """The file it wrote, read back, and the lines it printed (what it switched on)."""
    out.mkdir()
    printed = subprocess.run([str(exe), str(out), *args], check=True, capture_output=True,
                             text=True).stdout.splitlines()
    reader = GpuReader(out)
    reader.poll()
    return reader, printed


@pytest.fixture(scope="module")
def written(writer, tmp_path_factory) -> GpuReader:
    """What the library's buffer_completed() wrote for gputime_writer.c's records."""
    return _run_writer(writer, tmp_path_factory.mktemp("written") / "out")[0]


def test_api_records_of_launches_copies_and_memsets_only(writer, tmp_path):
    """With CUPTI's fine-grained switches the library asks for API records of the
    calls that queue GPU work only (CUPTI then builds none for cudaGetDevice, ...),
    and not the whole RUNTIME and DRIVER kinds, which would override them; the
    header says so. Without the switches: the whole kinds, and the header says that."""
    reader, printed = _run_writer(writer, tmp_path / "selected")
    kinds = {int(line.split()[1]) for line in printed if line.startswith("kind ")}
    assert kinds == {10, 1, 2}  # CONCURRENT_KERNEL, MEMCPY, MEMSET
    assert sorted(line for line in printed if not line.startswith("kind ")) == [
        "driver 279 1", "driver 307 1", "runtime 211 1", "runtime 31 1"]
    assert reader.all_api_records == 0
    assert _header_field(tmp_path / "selected", "api_records") == gputime.API_SELECTED

    reader, printed = _run_writer(writer, tmp_path / "all", "all")
    assert {int(line.split()[1]) for line in printed} == {10, 1, 2, 5, 4}  # + RUNTIME, DRIVER
    assert reader.all_api_records == 1
    assert _header_field(tmp_path / "all", "api_records") == gputime.API_ALL
    # the records kept are the same either way: cudaGetDevice's is thrown away
    assert len(reader.work) == 4 and (reader.work[0].pid, 6) not in reader._apis


def test_an_attach_asks_for_the_whole_api_kinds(writer, tmp_path):
    """In a process whose CUDA already runs, CUPTI's fine-grained switches give
    no API record: an attach asks for the whole RUNTIME and DRIVER kinds even
    where the switches exist, and keeps only the records of calls that queue work."""
    reader, printed = _run_writer(writer, tmp_path / "attached", "attached")
    assert {int(line.split()[1]) for line in printed} == {10, 1, 2, 5, 4}  # + RUNTIME, DRIVER
    assert not [line for line in printed if not line.startswith("kind ")]
    assert _header_field(tmp_path / "attached", "api_records") == gputime.API_ALL
    assert len(reader.work) == 4 and (reader.work[0].pid, 6) not in reader._apis


def test_an_attach_for_serve_asks_for_the_gpu_work_only(writer, tmp_path):
    """serve joins no GPU record to a call (without --py-stacks): its attach asks
    CUPTI for kernels, copies and memsets only, no API record of any call."""
    _, printed = _run_writer(writer, tmp_path / "work", "work-only")
    assert {int(line.split()[1]) for line in printed} == {10, 1, 2}  # CONCURRENT_KERNEL...
    assert not [line for line in printed if not line.startswith("kind ")]
    assert _header_field(tmp_path / "work", "api_records") == gputime.API_NONE


def _header_field(directory: Path, name: str) -> int:
    (path,) = directory.glob("gputime.*.bin")
    data = path.read_bytes()
    return struct.unpack_from("<I", data, gputime.HEADER_OFFSETS[name])[0]


def test_library_writer_read_back(written):
    kernel, again, copy, memset = written.work
    pid = kernel.pid
    assert (kernel.kind, kernel.start_ns, kernel.end_ns, kernel.device, kernel.context,
            kernel.stream, kernel.correlation, kernel.name) == (
        "kernel", 2000, 4500, 1, 3, 13, 7, "_Z6vecAddPKfS0_Pfi")
    assert kernel.api == gputime.ApiCall(4242, 1000, 1900, "cudaLaunchKernel")
    assert again.name == kernel.name and again.api is None  # correlation 10: no API record
    assert (copy.kind, copy.name, copy.bytes, copy.stream, copy.duration_ns) == (
        "memcpy", "HtoD", 1 << 20, 14, 2000)
    assert copy.api == gputime.ApiCall(4243, 5000, 9000, "cudaMemcpy")
    assert (memset.kind, memset.bytes, memset.device, memset.stream) == ("memset", 4096, 0, 7)
    # the driver launch is kept too; cudaGetDevice (no launch, copy or memset) is not
    assert written._apis[(pid, 8)].function == "cuLaunchKernel"
    assert (pid, 6) not in written._apis
    assert written.dropped == 5 and not written.statuses and written.files == 1


def _header(clock: int = gputime.CLOCK_MONOTONIC, offset: int = 0, pid: int = 77,
            system_tids: int = 1) -> bytes:
    return gputime.HEADER.pack(gputime.MAGIC, gputime.VERSION, pid, clock, RECORD.size, offset,
                               system_tids, 0)


def _record(kind: int, text: str = "", **fields: int) -> bytes:
    body = text.encode() + b"\0" if text else b""
    body += b"\0" * (-len(body) % 8)
    values = dict(correlation=0, start=0, end=0, bytes=0, device=0, context=0, stream=0, tid=0,
                  cbid=0, name_id=0, domain=0, copy_kind=0)
    values.update(fields)
    return RECORD.pack(kind, RECORD.size + len(body), *values.values()) + body


def test_reader_takes_records_as_they_are_written(tmp_path):
    """A record cut short (CUPTI's thread mid-write) is read at the next poll, whole."""
    data = (_header() + _record(gputime.NAME, "k", name_id=1)
            + _record(gputime.KERNEL, correlation=3, start=10, end=30, name_id=1)
            + _record(gputime.FUNCTION, "cudaLaunchKernel_v7000", domain=5, cbid=211)
            + _record(gputime.API, correlation=3, start=1, end=5, tid=9, domain=5, cbid=211))
    path = tmp_path / "gputime.77.bin"
    cut = gputime.HEADER.size + RECORD.size + 8 + 20  # inside the kernel record
    path.write_bytes(data[:cut])
    reader = GpuReader(tmp_path)
    assert reader.poll() == []
    with open(path, "ab") as f:
        f.write(data[cut:])
    (kernel,) = reader.poll()
    assert (kernel.pid, kernel.name, kernel.duration_ns) == (77, "k", 20)
    assert kernel.api == gputime.ApiCall(9, 1, 5, "cudaLaunchKernel")
    assert reader.poll() == []


def test_cupti_realtime_clock_moved_onto_monotonic(tmp_path):
    """When the timestamp callback could not be set, CUPTI's CLOCK_REALTIME
    stamps are moved by the offset the library took."""
    (tmp_path / "gputime.5.bin").write_bytes(
        _header(gputime.CLOCK_REALTIME, -1_000_000, pid=5)
        + _record(gputime.MEMSET, correlation=1, start=5_000_000, end=5_000_100, bytes=8)
        + _record(gputime.API, correlation=1, start=4_000_000, end=4_500_000, tid=5, domain=5))
    reader = GpuReader(tmp_path)
    (w,) = reader.poll()
    assert (w.start_ns, w.end_ns) == (4_000_000, 4_000_100)
    assert (w.api.start_ns, w.api.end_ns) == (3_000_000, 3_500_000)


def test_cupti_default_thread_ids_are_not_joined(tmp_path):
    """Without system thread ids CUPTI's API records carry pthread_self()'s low
    32 bits, which no row has: the work is kept (stats), never joined, and said."""
    (tmp_path / "gputime.6.bin").write_bytes(
        _header(pid=6, system_tids=0)
        + _record(gputime.KERNEL, correlation=1, start=10, end=20)
        + _record(gputime.API, correlation=1, start=1, end=5, tid=0x5A5A5A00, domain=5))
    reader = GpuReader(tmp_path)
    (w,) = reader.poll()
    assert w.api is None and reader.foreign_tids == 1


def test_status_and_foreign_files(tmp_path):
    (tmp_path / "gputime.8.bin").write_bytes(
        _header(pid=8) + _record(gputime.STATUS, "cannot load libcupti"))
    (tmp_path / "gputime.9.bin").write_bytes(b"not ours" * 8)
    reader = GpuReader(tmp_path)
    assert reader.poll() == []
    assert reader.statuses == {8: "cannot load libcupti"} and reader.bad_files == 1


def call(event: str, ts: int, duration: int, tid: int = 9, pid: int = 77,
         api: str = "runtime") -> Call:
    return Call(ts / 1e6, ts, pid, tid, "app", event, api, "kernel", duration, 0, "cudaSuccess",
                args={}, details="")


def work(correlation: int, start: int, end: int, api_start: int, api_end: int, tid: int = 9,
         kind: str = "kernel", name: str = "k") -> GpuWork:
    return GpuWork(77, kind, start, end, 0, 1, 7, correlation, name,
                   api=gputime.ApiCall(tid, api_start, api_end, "cudaLaunchKernel"))


def test_join_gives_the_work_to_the_outermost_call():
    """cudaLaunchKernel made cuLaunchKernel: the API interval lies inside both;
    the call the program made gets it. Calls of other threads and calls that
    end before the API call do not."""
    before = call("cudaMalloc", 100, 50)
    runtime = call("cudaLaunchKernel", 1000, 900)
    driver = call("cuLaunchKernel", 1100, 700, api="driver")
    other_thread = call("cudaLaunchKernel", 1000, 900, tid=10)
    w = work(1, 3000, 4000, 1200, 1700)
    assert join([before, runtime, driver, other_thread], [w]) == 0
    assert runtime.gpu == [w]
    assert driver.gpu is None and before.gpu is None and other_thread.gpu is None


def test_join_counts_work_of_calls_not_traced():
    c = call("cudaLaunchKernel", 1000, 100)
    unknown = work(1, 3000, 4000, 5000, 5100)  # its call started after c ended
    no_api = GpuWork(77, "kernel", 1, 2, 0, 0, 0, 2, "k")
    assert join([c], [unknown, no_api]) == 2 and c.gpu is None


def test_join_falls_back_to_the_driver_call_inside_an_untraced_api_call():
    """cuBLAS's static runtime made cudaLaunchKernelExC (no symbol: not traced),
    which made cuLaunchKernelEx (traced): CUPTI's API record is the runtime
    call's; the kernel goes to the driver call inside it, not to a call after it."""
    before = call("cudaMalloc", 100, 50)
    driver = call("cuLaunchKernelEx", 1100, 500, api="driver")
    after = call("cuLaunchKernelEx", 2000, 500, api="driver")
    w = work(1, 3000, 4000, 1000, 1700)
    assert join([before, driver, after], [w]) == 0
    assert driver.gpu == [w] and after.gpu is None and before.gpu is None
    late = work(2, 5000, 6000, 1800, 2200)  # the call after starts inside but ends outside
    assert join([before, driver, after], [late]) == 1


def test_graph_launch_spans_its_kernels():
    c = call("cudaGraphLaunch", 1000, 900)
    ws = [work(1, 5000, 6000, 1100, 1200), work(1, 3000, 4000, 1100, 1200, name="k2")]
    assert join([c], ws) == 0
    assert [w.start_ns for w in c.gpu] == [3000, 5000]
    assert gpu_object(c.gpu) == {"kind": "kernel", "start_ns": 3000, "duration_ns": 3000,
                                 "device": 0, "stream": 7, "context": 1, "count": 2}


def test_gpu_object_of_a_copy():
    w = GpuWork(1, "memcpy", 10, 110, 2, 1, 14, 3, "DtoH", bytes=4096)
    assert gpu_object([w]) == {"kind": "memcpy", "start_ns": 10, "duration_ns": 100,
                               "device": 2, "stream": 14, "context": 1, "bytes": 4096,
                               "copy_kind": "DtoH"}


def test_library_built_in_the_cache(tmp_path, monkeypatch):
    if not (cuda_home() / "include" / "cupti.h").is_file():
        pytest.skip("no CUPTI headers")
    monkeypatch.setenv("CUDAPROBE_CACHE", str(tmp_path))
    built, why = cupti.build_library()
    assert built is not None and built.parent == tmp_path, why
    assert "InitializeInjection" in subprocess.run(["nm", "-D", str(built)], capture_output=True,
                                                   text=True).stdout
    assert cupti.build_library() == (built, "")  # the cached one, not built again
    setup = cupti.prepare({b"CUDA_INJECTION64_PATH": b"/opt/other.so"})
    assert setup.env == {} and "CUDA_INJECTION64_PATH=/opt/other.so" in setup.why
    setup = cupti.prepare({})
    try:
        assert setup.env[cupti.INJECTION_VAR] == str(built)
        directory = Path(setup.env[cupti.DIR_VAR])
        assert directory.is_dir() and directory.stat().st_mode & 0o777 == 0o700
    finally:
        setup.close()


def test_a_cached_library_not_as_built_is_built_again(monkeypatch, tmp_path):
    """A library in the cache is loaded only if its bytes have the digest kept
    beside it when it was built: one cut short, or another build's, is built
    again, and a link put in its place is replaced, never followed."""
    if not (cuda_home() / "include" / "cupti.h").is_file():
        pytest.skip("no CUPTI headers")
    monkeypatch.setenv("CUDAPROBE_CACHE", str(tmp_path))
    built, why = cupti.build_library()
    assert built is not None, why
    good = built.read_bytes()
    assert cupti.cached_library_intact(built)
    built.write_bytes(good[: len(good) // 2])  # cut short: still root's, still 0755
    assert not cupti.cached_library_intact(built)
    assert cupti.build_library() == (built, "")
    assert built.read_bytes() == good and cupti.cached_library_intact(built)
    built.unlink()
    built.symlink_to("/etc/hostname")
    assert cupti.build_library() == (built, "")
    assert not built.is_symlink() and built.read_bytes() == good
    assert Path("/etc/hostname").read_bytes() != good


def test_a_file_made_a_huge_hole_is_read_in_bounded_chunks(tmp_path):
    """The process grows its file to 1 TiB (sparse: free for it): the records
    before are read, the hole reads as zeros, which no record is, and the file
    is done with: counted, never read whole (that was a MemoryError)."""
    path = tmp_path / "gputime.77.bin"
    path.write_bytes(_header() + _record(gputime.KERNEL, correlation=1, start=1, end=2))
    os.truncate(path, 1 << 40)
    reader = GpuReader(tmp_path)
    (w,) = reader.poll()
    assert w.pid == 77 and reader.bad_files == 1
    assert reader.poll() == [] and reader.bad_files == 1  # not read again


def test_a_file_read_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(gputime, "CHUNK", 100)
    records = [_record(gputime.KERNEL, correlation=i, start=i, end=i + 1) for i in range(20)]
    (tmp_path / "gputime.77.bin").write_bytes(_header() + b"".join(records))
    assert [w.correlation for w in GpuReader(tmp_path).poll()] == list(range(20))


def test_the_pid_is_the_one_known_not_the_one_written(tmp_path):
    """A directory's file must say the pid of its name; an attached process's
    records are of the process attached, whatever its header says."""
    (tmp_path / "gputime.78.bin").write_bytes(
        _header(pid=1) + _record(gputime.KERNEL, correlation=1, start=1, end=2))
    reader = GpuReader(tmp_path)
    assert reader.poll() == [] and reader.bad_files == 1
    fd = os.memfd_create("records")
    try:
        os.write(fd, _header(pid=1) + _record(gputime.KERNEL, correlation=1, start=1, end=2))
        attached = GpuReader(None)
        attached.add_file(fd, 4242)
        (w,) = attached.poll()
        assert w.pid == 4242 and attached.offset(fd) == os.fstat(fd).st_size
    finally:
        os.close(fd)


def test_links_and_fifos_in_the_directory_are_not_followed(tmp_path):
    (tmp_path / "gputime.79.bin").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "gputime.80.bin")
    reader = GpuReader(tmp_path)
    assert reader.poll() == [] and reader.bad_files == 1  # the FIFO; the link not opened


def test_names_kept_per_process_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(gputime, "MAX_NAME_BYTES", 10)
    (tmp_path / "gputime.77.bin").write_bytes(
        _header() + _record(gputime.NAME, "abcdefgh", name_id=1)
        + _record(gputime.NAME, "ijklmnop", name_id=2)
        + _record(gputime.KERNEL, correlation=1, name_id=1)
        + _record(gputime.KERNEL, correlation=2, name_id=2))
    assert [w.name for w in GpuReader(tmp_path).poll()] == ["abcdefgh", ""]


def _loop(skew: int, n: int = 2000, period: int = 5000, jitter: int = 1300, seed: int = 3):
    """A launch-bound loop: calls every `period` ns (give or take `jitter`), each
    with its kernel's API record inside it, stamped `skew` ns off the rows' clock."""
    rng = random.Random(seed)
    calls, works, t = [], [], 1_000_000_000
    for i in range(n):
        t += period + rng.randrange(-jitter, jitter + 1) if jitter else period
        memcpy = i % 7 == 3
        c = call("cudaMemcpyAsync" if memcpy else "cudaLaunchKernel", t, 2200)
        api = gputime.ApiCall(9, t + 500 + skew, t + 1700 + skew,
                              "cudaMemcpyAsync" if memcpy else "cudaLaunchKernel")
        works.append(GpuWork(77, "memcpy" if memcpy else "kernel", t + 9000 + skew,
                             t + 11000 + skew, 0, 1, 7, i, "k", api=api))
        calls.append(c)
    return calls, works


@pytest.mark.parametrize("skew", [-37_300, 800, 1_450_000])
def test_cupti_clock_is_aligned_by_the_api_records(skew):
    """An attached process's CUPTI stamps in its own clock, one offset read at
    the attach: off by even a microsecond, a launch's API record falls outside
    its call. Aligned by the records, every kernel goes to its own call, and
    its GPU times move onto the rows' clock."""
    calls, works = _loop(skew)
    assert join(calls, [GpuWork(**{**w.__dict__, "api": None}) for w in works]) == len(works)
    unaligned, _ = _loop(skew)
    assert join(unaligned, _loop(skew)[1]) > len(works) // 2  # as before: most unjoined
    joined = gputime.join_work(calls, works, {77})
    assert (joined.unjoined, joined.outside) == (0, 0)
    assert abs(joined.shifts[77] + skew) <= 200
    for c, w in zip(calls, works):
        assert c.gpu == [w]
        assert abs(w.start_ns - (c.ts_ns + 9000)) <= 200


def test_a_loop_as_regular_as_a_clock_is_aligned_to_the_nearest_agreement():
    """Every period agrees as well as the true offset in a loop with no jitter at
    all: the offset nearest the one read at the attach is taken, not a period away."""
    calls, works = _loop(700, jitter=0)
    joined = gputime.join_work(calls, works, {77})
    assert joined.unjoined == 0 and abs(joined.shifts[77] + 700) <= 200
    assert all(c.gpu == [w] for c, w in zip(calls, works))


def test_too_few_records_agreeing_move_nothing_and_say_so():
    calls, works = _loop(1_000_000, n=10)  # 10 calls: fewer than ALIGN_MIN_VOTES
    starts = [w.start_ns for w in works]
    joined = gputime.join_work(calls, works, {77})
    assert joined.unjoined + joined.outside == len(works)
    assert joined.shifts == {77: None} and [w.start_ns for w in works] == starts
    said: list[str] = []
    gputime.say_shifts(joined.shifts, said.append)
    assert said == ["--gpu-time: pid 77's GPU timestamps could not be aligned with its rows "
                    "(too few of CUPTI's API records met a traced call): its work is joined "
                    "by the clock offset read at the attach, and may go unjoined"]


def test_a_file_in_cuptis_own_clock_is_marked_for_alignment(tmp_path):
    (tmp_path / "gputime.77.bin").write_bytes(_header(clock=gputime.CLOCK_REALTIME))
    (tmp_path / "gputime.78.bin").write_bytes(_header(pid=78))
    reader = GpuReader(tmp_path)
    reader.poll()
    assert reader.cupti_clock == {77}


def test_work_of_calls_outside_the_traced_window_is_counted_apart():
    """An attached process's CUPTI records from the attach to the stop, longer
    than the probes' window: the kernels of calls before or after it are said
    as such, not as made by calls not traced."""
    calls, works = _loop(0)
    inside = calls[100:1900]  # the probes saw the middle of the loop only
    joined = gputime.join_work(inside, works, {77})
    assert (joined.unjoined, joined.outside) == (0, 200)
    assert all(c.gpu == [w] for c, w in zip(calls[100:1900], works[100:1900]))
    other = GpuWork(77, "kernel", 0, 1, 0, 1, 7, 99999, "k",
                    api=gputime.ApiCall(12, inside[500].ts_ns, inside[500].ts_ns + 10, "x"))
    assert gputime.join_work(inside, [other], {77}).unjoined == 1  # a thread not traced


def test_a_library_shipped_with_the_sources_is_used_without_headers(monkeypatch, tmp_path):
    """What scripts/build-image does (build_shipped into the installed
    package), and what the image, which has no CUDA headers, then finds: the
    library beside its sources, used only while its bytes are as built."""
    if not (cuda_home() / "include" / "cupti.h").is_file():
        pytest.skip("no CUPTI headers")
    package = tmp_path / "cudaprobe"
    shutil.copytree(cupti.cupti_source_dir(), package / "cupti")
    built, why = cupti.build_shipped(package)
    assert built is not None and built.parent == package / "cupti" / cupti.PREBUILT, why
    monkeypatch.setattr(cupti, "cupti_source_dir", lambda: package / "cupti")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-toolkit"))  # as in the image
    monkeypatch.setenv("CUDAPROBE_CACHE", str(tmp_path / "cache"))
    assert cupti.build_library() == (built, "")
    built.write_bytes(built.read_bytes()[:1000])  # not as built: not used, and none to build
    assert cupti.shipped_library() is None
    found, why = cupti.build_library()
    assert found is None and "no CUPTI headers" in why


def test_alignment_samples_both_calls_of_a_loop_that_alternates_two():
    """A loop alternating two launches (heavy(), then light() 30 us after it
    returns, each pair a millisecond apart), more records than the sample: a
    stride of two took heavy()'s records alone. heavy()'s call takes 3 to 25 us
    and its record comes at its end, so its records spread their votes for
    their own call over microseconds, and all vote alike for light()'s call:
    the offset chosen was that one (seen on the CPU machine: 70% of the records
    then found no call). A sample of both: every record on its own call."""
    rng = random.Random(5)
    calls, works, t = [], [], 1_000_000_000
    for i in range(500):  # 1,000 records, against ALIGN_SAMPLE's 400
        t += 1_100_000 + rng.randrange(-50_000, 50_000)
        duration = rng.randrange(3_000, 25_000)
        end = t + duration
        calls.append(call("cudaLaunchKernel", t, duration))
        works.append(GpuWork(77, "kernel", end + 60_000, end + 70_000, 0, 1, 7, 2 * i, "k",
                             api=gputime.ApiCall(9, end - 1_000, end - 940, "cudaLaunchKernel")))
        light = end + 30_000
        calls.append(call("cudaLaunchKernel", light, 3_000))
        works.append(GpuWork(77, "kernel", light + 60_000, light + 63_000, 0, 1, 7, 2 * i + 1,
                             "k", api=gputime.ApiCall(9, light + 1_470, light + 1_530,
                                                      "cudaLaunchKernel")))
    joined = gputime.join_work(calls, works, {77})
    assert (joined.unjoined, joined.outside) == (0, 0)
    assert abs(joined.shifts[77]) <= 500
    assert [c.gpu[0].correlation for c in calls] == list(range(len(calls)))
