"""The exported script under the real bpftrace, checked against `cudaprobe trace`.

Both run the same workload on a private copy of the toolkit's libcudart, in a
directory whose name has a space and quotes: uprobes belong to a file, so
other tests tracing the toolkit's libcudart at the same time cannot add calls
here (nor hold probes on these functions), and the script must quote the path.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cudaprobe.output.bpftrace import COLUMNS

from ..conftest import HANG_S, build_workload, libcuda_path
from .conftest import expected_calls, run_cudaprobe, trace_jsonl

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

BPFTRACE = shutil.which("bpftrace")
ORDER = ["cudaGetDeviceCount", "cudaMalloc", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
         "cudaLaunchKernel", "cudaStreamCreate", "cudaEventElapsedTime", "cudaFree",
         "cudaDeviceSynchronize"]


@pytest.fixture(autouse=True)
def _needs_bpftrace() -> None:
    if BPFTRACE is None:
        pytest.skip("bpftrace is not installed")


@pytest.fixture
def cudart(tmp_path, libcudart, monkeypatch) -> Path:
    """The private libcudart copy; the workload loads it (LD_LIBRARY_PATH beats RUNPATH)."""
    where = tmp_path / 'cuda "lib" dir'
    where.mkdir()
    lib = where / libcudart.name
    shutil.copy2(libcudart, lib)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(where))
    return lib


def export(tmp_path: Path, *args: str, name: str = "cuda_events.bt") -> Path:
    script = tmp_path / name
    p = run_cudaprobe("export", "bpftrace", *args, "-o", str(script))
    assert p.returncode == 0, p.stderr
    return script


# bpftrace 0.17 aborts when usym() looks up a process that exits at that moment
# (an unchecked read_symlink of /proc/PID/exe; fixed in later versions)
USYM_EXIT_RACE = "filesystem error: read_symlink"


def run_bpftrace(script: Path, command: str, timeout: float = HANG_S
                 ) -> tuple[str, subprocess.CompletedProcess]:
    """`bpftrace -o OUT SCRIPT -c COMMAND`: (what the script printed, the process)."""
    out = script.with_suffix(".out")
    # thousands of lines, none lost; and the default set's ~1000 attach points, as
    # the script's usage line says (bpftrace's limit is 512)
    env = dict(os.environ, BPFTRACE_PERF_RB_PAGES="1024", BPFTRACE_MAX_PROBES="4096")
    for _ in range(3):
        p = subprocess.run([BPFTRACE, "-o", str(out), str(script), "-c", command], env=env,
                           capture_output=True, text=True, timeout=timeout)
        if USYM_EXIT_RACE not in p.stderr:
            break
    assert p.returncode == 0, p.stderr
    return out.read_text(), p


def parse_rows(output: str) -> list[dict]:
    """The script's call lines, cut at the banner's column widths, in the order the
    calls started: bpftrace reads one buffer per CPU, so a thread that moved to
    another CPU can have its lines printed out of order."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("TIME(ms)"))
    assert "Lost" not in output, output[-500:]
    rows, starts, at = [], [], 0
    for c in COLUMNS:
        starts.append(at)
        at += c.width + 1
    for line in lines[header + 1:]:
        if not re.match(r" *\d+\.\d{3} ", line):
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:])] + [line[starts[-1]:]]
        row = dict(zip([c.title for c in COLUMNS], cells))
        row["args"] = parse_details(row["DETAILS"])
        rows.append(row)
    return sorted(rows, key=lambda r: float(r["TIME(ms)"]))


def parse_details(details: str) -> dict[str, str]:
    """`k=v k=v`; a word without `=` (of a demangled kernel name) belongs to the value
    before it."""
    args: dict[str, str] = {}
    key = None
    for word in details.split():
        if "=" in word:
            key, value = word.split("=", 1)
            args[key] = value
        elif key is not None:
            args[key] += " " + word
    return args


def as_text(value) -> str:
    """A JSONL argument value as the script prints it."""
    if isinstance(value, list):
        return "(" + ",".join(map(str, value)) + ")"
    return str(value)


def test_script_records_what_trace_records(tmp_path, cudart):
    exe = build_workload("runtime_calls.c")
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(cudart), command=[str(exe), "3"])
    assert proc.returncode == 0, proc.stderr
    assert summary["calls"] == len(calls) == 30

    # the functions the workload calls (the whole default set loads in the
    # whole-catalogue test below: bpftrace attaches its ~1000 probes one by one)
    script = export(tmp_path, "--lib", str(cudart), "-e", ",".join(ORDER))
    assert f'uprobe:"{cudart.parent}/'.replace('"lib"', '\\"lib\\"') in script.read_text()
    output, bt = run_bpftrace(script, f"{exe} 3")
    truth = expected_calls(bt.stdout)  # what the workload made in the bpftrace run
    rows = parse_rows(output)
    assert [r["EVENT"] for r in rows] == [c["event"] for c in calls] == ORDER * 3
    assert len({r["PID"] for r in rows}) == 1 and rows[0]["PROCESS"] == "runtime_calls"
    for row, call, made in zip(rows, calls, truth):
        assert row["RESULT"] == call["ret_name"] == "cudaErrorInsufficientDriver"
        assert float(row["LAT(us)"]) > 0
        assert row["args"].keys() == call["args"].keys() - {"func_name"}, row
        for key, value in call["args"].items():
            text = row["args"].get(key)
            if key == "func":  # named, or the address (ASLR: not trace's) printed once
                assert text in (made["func"], "fake_kernel"), text
            elif key == "args":  # the kernel's argument array, on the thread's stack
                assert text == made["args"], text
            elif value is None:  # a failed call's out-parameter: trace does not read it,
                assert call["ret"] != 0 and text, (key, text)  # the script prints it anyway
            elif isinstance(value, float):
                assert abs(float(text) - value) < 1e-5, (key, text, value)
            elif key != "func_name":
                assert text == as_text(value), (call["event"], key, text, value)
    launch = next(r for r in rows if r["EVENT"] == "cudaLaunchKernel")["args"]
    # sharedMem and stream are the 7th and 8th argument words: read from the stack
    assert launch["sharedMem"] == "1024" and launch["stream"] == "0x7000"
    memcpy = next(r for r in rows if r["EVENT"] == "cudaMemcpy")
    assert memcpy["DETAILS"] == "dst=0x1000 src=0x2000 count=4096 kind=HostToDevice"
    # the script prints out-parameters whatever the call returned: here what the
    # workload left there (the call failed); trace has them null
    elapsed = next(r for r in rows if r["EVENT"] == "cudaEventElapsedTime")["args"]
    assert elapsed == {"ms": "1.500000", "start": "0xe1", "end": "0xe2"}
    assert next(c for c in calls if c["event"] == "cudaEventElapsedTime")["args"]["ms"] is None


def test_threads_pair_their_own_calls_and_names_resolve(tmp_path, cudart):
    exe = build_workload("runtime_calls.c")
    script = export(tmp_path, "--lib", str(cudart), "-e", ",".join(ORDER))
    output, _ = run_bpftrace(script, f"{exe} 200 4")
    per_tid = collections.defaultdict(list)
    for row in parse_rows(output):
        per_tid[row["TID"]].append(row)
    assert len(per_tid) == 4
    for rows in per_tid.values():
        assert [r["EVENT"] for r in rows] == ORDER * 200
        assert {r["args"]["size"] for r in rows if r["EVENT"] == "cudaMalloc"} == {"1048576"}
        times = [float(r["TIME(ms)"]) for r in rows]
        assert times == sorted(times)
    names = {r["args"]["func"] for rows in per_tid.values() for r in rows
             if r["EVENT"] == "cudaLaunchKernel"}
    # usym() resolves while the process lives: the early launches at least; the
    # rest print the stub's address, once
    assert "fake_kernel" in names and len(names) <= 2, names
    assert all(n == "fake_kernel" or re.fullmatch(r"0x[0-9a-f]+", n) for n in names), names


def perf_events(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd) == "anon_inode:[perf_event]"
        except OSError:  # closed meanwhile
            pass
    return count


def wait_until_attached(bt: subprocess.Popen, probes: int, timeout: float = HANG_S) -> None:
    """Until bpftrace holds a perf event per uprobe (and one output buffer per CPU).
    Its banner is no sign: 0.17 prints it along with the first event."""
    deadline = time.monotonic() + timeout
    while perf_events(bt.pid) < probes + os.cpu_count():
        assert time.monotonic() < deadline and bt.poll() is None, "bpftrace did not attach"
        time.sleep(0.1)


def wait_until_mapped(pid: int, library: Path) -> None:
    deadline = time.monotonic() + HANG_S
    while str(library) not in Path(f"/proc/{pid}/maps").read_text():
        assert time.monotonic() < deadline, f"pid {pid} never mapped {library}"
        time.sleep(0.05)


def rows_so_far(out: Path) -> list[dict]:
    """The whole lines bpftrace has written to `out` yet."""
    text = out.read_text() if out.exists() else ""
    text = text[:text.rfind("\n") + 1]
    return parse_rows(text) if "TIME(ms)" in text else []


def test_pid_filter_traces_only_that_process(tmp_path, cudart):
    """Both processes call, the other one first; then the target. They run on
    one CPU, so that their lines go through one of bpftrace's per-CPU buffers
    in the order of the calls: once the target's lines are printed, any of the
    other's would be too (bpftrace 0.17 drops the lines it has not read yet
    when it is stopped)."""
    exe = build_workload("runtime_calls.c")
    one_cpu = min(os.sched_getaffinity(0))
    other, target = (subprocess.Popen([str(exe), "2", "1", "-"], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, text=True,
                                      preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}))
                     for _ in range(2))
    bt = None
    try:
        for p in (other, target):
            wait_until_mapped(p.pid, cudart)
        # few probes: bpftrace attaches them one by one, ~0.1-0.2 s each on some kernels
        script = export(tmp_path, "--pid", str(target.pid), "-e", "cudaMalloc,cudaMemset")
        text = script.read_text()
        # no --lib: the library is the one the process maps
        assert f"--pid {target.pid}" in text and cudart.name in text and cudart.parent.name in text
        out = tmp_path / "pid.out"
        # -B none: lines reach stdout as they are printed (-o's file is written
        # through a buffer, at the end)
        with out.open("w") as stdout:
            bt = subprocess.Popen([BPFTRACE, "-B", "none", str(script)], stdout=stdout,
                                  stderr=subprocess.DEVNULL)
        wait_until_attached(bt, len(re.findall(r"^u(?:ret)?probe:", text, re.M)))
        for p in (other, target):
            p.communicate("go\n", timeout=HANG_S)
            assert p.returncode == 0
        deadline = time.monotonic() + HANG_S
        while sum(r["PID"] == str(target.pid) for r in rows_so_far(out)) < 4:
            assert time.monotonic() < deadline and bt.poll() is None, out.read_text()[-500:]
            time.sleep(0.05)
    finally:
        for p in (other, target):
            p.kill()
            p.wait()
        if bt is not None:
            bt.send_signal(signal.SIGINT)
            bt.wait(timeout=HANG_S)
    rows = parse_rows(out.read_text())
    assert {r["PID"] for r in rows} == {str(target.pid)}
    assert collections.Counter(r["EVENT"] for r in rows) == {"cudaMalloc": 2, "cudaMemset": 2}


def test_summary_counts_calls_and_errors(tmp_path, cudart):
    exe = build_workload("runtime_calls.c")
    # the workload's calls of interest (a category's 100 probes cost bpftrace 15 s)
    script = export(tmp_path, "--lib", str(cudart), "--summary", "-e",
                    "cudaMalloc,cudaMemcpy,cudaMemcpyAsync")
    output, _ = run_bpftrace(script, f"{exe} 5")
    calls = dict(re.findall(r"^@calls\[(\w+)\]: (\d+)$", output, re.M))
    assert calls == {"cudaMalloc": "5", "cudaMemcpy": "5", "cudaMemcpyAsync": "5"}
    errors = re.findall(r"^@errors\[(\w+), (\d+), (\w+)\]: (\d+)$", output, re.M)
    assert sorted(errors) == [(name, "35", "cudaErrorInsufficientDriver", "5")
                              for name in sorted(calls)]
    assert output.count("@latency_ns[") == 3 and "|@" in output  # histogram bars
    assert "@start" not in output and "@runtime_error" not in output


FUNCTION_BLOCK = re.compile(r"\n(?=// \w+\()")  # each function's probes follow its comment
END_BLOCK = "\nEND\n{"


def probe_shape(block: str) -> str:
    """A function's two probes with what leaves their BPF programs the same taken
    out: the comment, the probe target, the function's id in the map keys, the
    text of printf's format (bpftrace keeps it; only its conversions reach the
    program) and the variables' names."""
    body = "\n".join(line for line in block.splitlines() if not line.startswith("//"))
    body = re.sub(r'^(u(?:ret)?probe):"(?:[^"\\]|\\.)*":\S+$', r"\1", body, flags=re.M)
    body = re.sub(r"\[tid, \d+\]", "[tid, ID]", body)
    body = re.sub(r'printf\("((?:[^"\\]|\\.)*)"',
                  lambda m: 'printf("' + " ".join(re.findall(r"%[-.\d]*l*[a-z]", m[1])) + '"',
                  body)
    names: dict[str, str] = {}
    return re.sub(r"\$\w+", lambda m: names.setdefault(m[0], f"$v{len(names)}"), body)


def one_function_per_shape(script: str) -> tuple[str, int]:
    """The script with the first function of each probe shape only (and its BEGIN
    and END whole): every distinct BPF program of the script, loaded once each.
    Returns it and how many functions the whole script has."""
    head, *blocks = FUNCTION_BLOCK.split(script)
    blocks[-1], end = blocks[-1].split(END_BLOCK, 1)
    kept: dict[str, str] = {}
    for block in blocks:
        kept.setdefault(probe_shape(block), block)
    return "\n".join([head, *kept.values()]) + END_BLOCK + end, len(blocks)


def test_the_whole_catalogue_loads_on_this_bpftrace(tmp_path, cudart):
    """Every probe program of the whole default set passes the verifier (the BPF
    stack is 512 bytes): each distinct one is loaded and attached once, the
    functions whose probes differ only in names and ids sharing it (a third of
    the probes, and of the time: bpftrace compiles, attaches and detaches them
    one by one)."""
    libs = ["--lib", str(cudart)]
    libcuda = libcuda_path()
    if libcuda is not None:
        copy = cudart.parent / "libcuda.so.1"
        shutil.copy2(libcuda, copy)
        libs += ["--lib", str(copy)]
    text = export(tmp_path, *libs).read_text()
    shapes, functions = one_function_per_shape(text)
    script = tmp_path / "shapes.bt"
    script.write_text(shapes)
    probes = len(re.findall(r"^u(?:ret)?probe:", shapes, re.M))
    assert functions == text.count("\nuprobe:")
    assert probes < len(re.findall(r"^u(?:ret)?probe:", text, re.M))
    output, p = run_bpftrace(script, "/usr/bin/true")
    assert re.search(rf"^Attaching {probes + 2} probes", p.stdout + p.stderr + output, re.M)
    assert "Tracing" in output and "Error loading" not in p.stderr
    if libcuda is not None:
        assert "cuLaunchKernel" in text and "cudaLaunchKernel" in text


def test_a_library_path_with_a_colon_is_refused_in_one_line(tmp_path, libcudart, monkeypatch):
    """bpftrace 0.17 cuts `uprobe:"/x/co:lon/lib.so":f` at the colon and finds no
    symbol: such a script would be written (exit 0) and fail when run. Refused,
    with the way out: the copy it suggests is attached by the real bpftrace."""
    where = tmp_path / "co:lon"
    where.mkdir()
    shutil.copy2(libcudart, where / libcudart.name)
    script = tmp_path / "colon.bt"
    p = run_cudaprobe("export", "bpftrace", "--lib", str(where / libcudart.name),
                      "-e", "cudaGetDeviceCount", "-o", str(script))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "has a colon" in p.stderr and "a copy of it" in p.stderr
    assert not script.exists()
    link = tmp_path / libcudart.name
    shutil.copy2(where / libcudart.name, link)
    count = tmp_path / "count.bt"
    p = run_cudaprobe("export", "bpftrace", "--lib", str(link), "-e", "cudaGetDeviceCount",
                      "--summary", "-o", str(count))
    assert p.returncode == 0, p.stderr
    exe = build_workload("steady_calls.c")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))  # the copy is what it loads
    out, _ = run_bpftrace(count, f"{exe} 3 0 0")
    assert re.search(r"cudaGetDeviceCount\D+3\b", out), out
