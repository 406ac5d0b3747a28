"""The generated BPF program: settings as -D cflags, probe configs from the catalogue."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

import pytest

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.probe import bpfprog, kernel_btf
from cudaprobe.probe.plan import Probe


def probes():
    names = ["cudaMalloc", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaEventElapsedTime"]
    return [Probe(i, n, catalogue.BY_NAME[n]) for i, n in enumerate(names)]


def test_probe_config_from_catalogue():
    p = probes()
    # (nstack, cfg_slot, out8, out4, str_slot, nargs, nouts, record size, func_slot,
    #  handle_slot, cfg_off, cfg_len, outer, kept); devPtr: an 8-byte out-parameter
    assert bpfprog.probe_config(p[0]) == (0, -1, 0b1, 0, -1, 2, 1, 88, -1, -1, 0, 0, 0, 0)
    # sharedMem, stream on the stack; the host stub (or handle) in slot 0
    assert bpfprog.probe_config(p[1]) == (2, -1, 0, 0, -1, 8, 0, 128, 0, 0, 0, 0, 0, 0)
    # config in slot 0: its first 40 bytes copied, the whole event sent; the host stub
    # in slot 1
    assert bpfprog.probe_config(p[2]) == (0, 0, 0, 0, -1, 3, 0, 320, 1, 1, 0, 40, 0, 0)
    # a float out-parameter
    assert bpfprog.probe_config(p[3]) == (0, -1, 0, 0b1, -1, 3, 1, 96, -1, -1, 0, 0, 0, 0)
    # a driver launch: its CUfunction in slot 0, no host stub
    launch = Probe(4, "cuLaunchKernel", catalogue.BY_NAME["cuLaunchKernel"])
    assert bpfprog.probe_config(launch)[8:10] == (-1, 0)
    # kept: its links stay in between serve --duty's slices (an allocation)
    assert bpfprog.probe_config(p[0], kept=True)[-1] == 1
    # a 3D copy: the window of its parameters from the destination on (structs.py)
    copy3d = Probe(5, "cudaMemcpy3D", catalogue.BY_NAME["cudaMemcpy3D"])
    assert bpfprog.probe_config(copy3d)[1] == 0
    assert bpfprog.probe_config(copy3d)[10:] == (96, 64, 0, 0)


def test_nccl_calls_are_the_outer_layer():
    """An NCCL probe is `outer`: with one in the plan the trace program marks
    the calls made inside one (CP_OUTER); not with CP_CALLER (memory), whose
    field it shares, nor in stats."""
    allreduce = Probe(4, "ncclAllReduce", catalogue.BY_NAME["ncclAllReduce"])
    assert bpfprog.probe_config(allreduce)[12] == 1
    assert "CP_OUTER" not in bpfprog.defines(probes(), bpfprog.Settings())
    assert bpfprog.defines([*probes(), allreduce], bpfprog.Settings())["CP_OUTER"] == "1"
    for settings in (bpfprog.Settings(callers=True), bpfprog.Settings(stats=True)):
        assert "CP_OUTER" not in bpfprog.defines([*probes(), allreduce], settings)

def test_multi_mode_needs_no_per_probe_programs():
    d = bpfprog.defines(probes(), bpfprog.Settings(attach="multi"))
    assert "CP_PROBES" not in d and "CP_FILTER_PID" not in d and "CP_ERRORS_ONLY" not in d
    assert d["CP_RINGBUF_PAGES"] == "4096"


def test_perf_mode_and_filters_as_cflags():
    s = bpfprog.Settings(attach="perf", filter_pid=True, errors_only=True, ringbuf_pages=64)
    flags = bpfprog.cflags(probes(), s)
    assert all(f.startswith("-DCP_") for f in flags)
    assert "-DCP_PROBES=CP_PROBE(0) CP_PROBE(1) CP_PROBE(2) CP_PROBE(3)" in flags
    assert "-DCP_FILTER_PID=1" in flags and "-DCP_ERRORS_ONLY=1" in flags
    assert "-DCP_RINGBUF_PAGES=64" in flags


def test_render_is_the_compiled_program():
    settings = bpfprog.Settings(attach="multi", filter_pid=True)
    text = bpfprog.render(probes(), settings)
    assert "#define CP_FILTER_PID 1" in text
    assert bpfprog.source(settings) in text  # what bcc is given, after the settings
    assert "struct cp_event {" in text and "pairing_entry(" in text  # both headers inlined
    assert "#include \"" not in text
    assert "int cp_enter(struct pt_regs *ctx)" in text
    assert "1 cudaLaunchKernel: {2, -1, 0, 0, -1, 8, 0, 128, 0, 0, 0, 0, 0, 0}" in text


def test_trace_and_stats_are_two_programs():
    trace = bpfprog.source(bpfprog.Settings(attach="multi"))
    stats = bpfprog.source(bpfprog.Settings(attach="multi", stats=True))
    assert "BPF_RINGBUF_OUTPUT(events" in trace and "BPF_RINGBUF_OUTPUT(events" not in stats
    assert "BPF_PERCPU_ARRAY(stats" in stats and "BPF_PERCPU_ARRAY(stats" not in trace
    for text in (trace, stats):  # the shared part once each, and no mode switch
        assert text.count("static __always_inline int cp_entry(") == 1
        assert "CP_STATS" not in text


def test_attach_mode_override(monkeypatch):
    monkeypatch.setenv("CUDAPROBE_ATTACH", "perf")
    assert bpfprog.Settings().attach == "perf"
    monkeypatch.setenv("CUDAPROBE_ATTACH", "multi")
    assert bpfprog.Settings().attach == "multi"


def test_pairing_slots_fit_their_memory_budget(monkeypatch):
    monkeypatch.delenv("CUDAPROBE_PAIR_THREADS", raising=False)
    # trace: 328-byte entries; 4 probes * 64 slots is 82 KiB
    trace, stats = bpfprog.ENTRY_SIZES["trace"], bpfprog.ENTRY_SIZES["stats"]
    assert (trace, stats) == (328, 24)
    d = bpfprog.defines(probes(), bpfprog.Settings(attach="multi"))
    assert (d["CP_PAIR_THREADS"], d["CP_NR_PROBES"]) == ("64", "4")
    # 1000 probes: 64 slots would be 21 MB, so 16 slots (5.2 MB), a power of 2
    assert bpfprog.pair_threads(1000, trace) == 16
    assert 16 * 1000 * trace <= bpfprog.PAIR_BYTES < 32 * 1000 * trace
    assert bpfprog.pair_threads(1000, stats) == 64
    assert bpfprog.pair_threads(10**6, trace) == 1  # never none: the hash takes the rest


def test_pairing_slots_override(monkeypatch):
    monkeypatch.setenv("CUDAPROBE_PAIR_THREADS", "1")
    assert bpfprog.pair_threads(4, 320) == 1
    for bad in ("3", "0", "128", "x", "-1"):  # not a power of 2 up to 64: the default
        monkeypatch.setenv("CUDAPROBE_PAIR_THREADS", bad)
        assert bpfprog.pair_threads(4, 320) == 64


SETTINGS = [bpfprog.Settings(attach="multi"),
            bpfprog.Settings(attach="perf", filter_pid=True, filter_comm=True, errors_only=True,
                             stacks=True, callers=True),
            bpfprog.Settings(attach="multi", stats=True),
            bpfprog.Settings(attach="perf", stats=True, filter_pid=True),
            bpfprog.Settings(attach="multi", py_stacks=True),
            bpfprog.Settings(attach="multi", duty_exact=frozenset({"cudaMalloc"}))]


def needs_btf(settings: bpfprog.Settings) -> None:
    if settings.py_stacks and kernel_btf.task_offsets() is None:
        pytest.skip("no kernel BTF: --py-stacks has no offsets to give")


@pytest.fixture(scope="module")
def preprocess(tmp_path_factory):
    """Runs the C preprocessor over a program as bcc gets it, with the -D settings
    given; bcc's kernel headers are stood in for by an empty one."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    stub = tmp_path_factory.mktemp("stub")
    (stub / "uapi" / "linux").mkdir(parents=True)
    (stub / "uapi" / "linux" / "ptrace.h").write_text("")

    def run(settings: bpfprog.Settings | None, flags: list[str],
            text: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([cc, "-E", f"-I{stub}", *flags, "-"],
                              input=bpfprog.source(settings) if text is None else text,
                              capture_output=True, text=True)
    return run


@pytest.mark.parametrize("settings", SETTINGS)
def test_the_c_takes_every_number_from_bpfprog(settings, preprocess):
    """bpfprog.Settings holds the defaults: the C has none. Given only the
    switches, the program stops at an #error for each number it uses, and
    numbers() gives exactly those; given them, it builds."""
    needs_btf(settings)
    switches = [f"-D{k}={v}" for k, v in bpfprog.switches(probes(), settings).items()]
    p = preprocess(settings, switches)
    needed = set(re.findall(r'#error "(CP_\w+) \(', p.stderr))
    assert p.returncode != 0 and {"CP_NR_PROBES", "CP_MAX_INFLIGHT"} <= needed
    assert set(bpfprog.numbers(probes(), settings)) == needed
    assert preprocess(settings, bpfprog.cflags(probes(), settings)).returncode == 0
    src = bpfprog.source(settings)
    assert not [n for n in needed if re.search(rf"^#define {n}\b", src, re.M)]


def test_each_program_is_given_only_its_numbers():
    trace, stats = (set(bpfprog.numbers(probes(), SETTINGS[i])) for i in (0, 2))
    assert {"CP_RINGBUF_PAGES", "CP_MAX_STACKS", "CP_MAX_SITES"} <= trace - stats
    assert stats < trace


def safepoint_source() -> str:
    return (bpfprog.bpf_dir() / bpfprog.SAFEPOINT).read_text()


def test_no_map_size_is_a_literal():
    """Every map's size is a setting, a constant of a bpf/ header, or 1: in
    each program, the GPU-time injection's safe point among them."""
    sources = [bpfprog.source(settings) for settings in SETTINGS] + [safepoint_source()]
    for src in sources:
        maps = re.findall(r"^(BPF_\w+)\((.*)\);", src, re.M)
        assert len(maps) >= 4
        for kind, args in maps:
            size = args.rsplit(",", 1)[-1].strip()
            assert size == "1" or re.fullmatch(r"CP_\w+( \* CP_\w+)?", size), (kind, args)


@pytest.mark.parametrize("settings", SETTINGS[::2])
def test_the_compile_stops_for_a_missing_setting(settings, preprocess):
    needs_btf(settings)
    flags = bpfprog.cflags(probes(), settings)
    for name in bpfprog.numbers(probes(), settings):
        p = preprocess(settings, [f for f in flags if not f.startswith(f"-D{name}=")])
        assert p.returncode != 0 and f"{name} (" in p.stderr, (name, p.stderr[-300:])


SWITCHES = ("filter_pid", "filter_comm", "errors_only", "stats", "stacks", "callers",
            "py_stacks")


def every_settings():
    """Settings for every combination of the switches, in both attach modes."""
    for attach in bpfprog.ATTACH_MODES:
        for bits in range(1 << len(SWITCHES)):
            on = {name: bool(bits >> i & 1) for i, name in enumerate(SWITCHES)}
            yield bpfprog.Settings(attach=attach, **on)


def test_no_combination_attaches_a_tracepoint_twice(preprocess):
    """A program may define each tracepoint once: whatever the settings turn on
    (the --comm filter and --py-stacks both act at exec), the preprocessed
    program has no tracepoint twice, and builds."""
    if kernel_btf.task_offsets() is None:
        pytest.skip("no kernel BTF: --py-stacks has no offsets to give")
    seen = set()
    for settings in every_settings():
        flags = bpfprog.cflags(probes(), settings)
        if tuple(flags) in seen:
            continue
        seen.add(tuple(flags))
        p = preprocess(settings, flags)
        assert p.returncode == 0, (settings, p.stderr[-300:])
        points = re.findall(r"TRACEPOINT_PROBE\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", p.stdout)
        assert len(points) == len(set(points)), (settings, points)
        comm = settings.filter_pid and settings.filter_comm
        if comm or settings.py_stacks and not settings.stats:
            assert ("sched", "sched_process_exec") in points, settings
    assert len(seen) > 32


def test_wakeups_are_followed_only_with_py_stacks(preprocess):
    """The wakeup tracepoints of borrowed stacks (sched_waking, sched_wakeup_new)
    run on every wakeup of the machine: they are in the program only where
    --py-stacks is on (trace records) and the kernel has what they read
    (5.15+), in none of the others."""
    if kernel_btf.task_offsets() is None:
        pytest.skip("no kernel BTF: --py-stacks has no offsets to give")
    seen = set()
    for settings in every_settings():
        flags = bpfprog.cflags(probes(), settings)
        if tuple(flags) in seen:
            continue
        seen.add(tuple(flags))
        out = preprocess(settings, flags).stdout
        if settings.py_stacks and not settings.stats:  # and on an older kernel: none
            older = dataclasses.replace(settings, py_wakers=False)
            text = preprocess(older, bpfprog.cflags(probes(), older)).stdout
            assert "RAW_TRACEPOINT_PROBE" not in text and "py_wakers" not in text
        raw = set(re.findall(r"RAW_TRACEPOINT_PROBE\s*\(\s*(\w+)\s*\)", out))
        want = {"sched_waking", "sched_wakeup_new"} if settings.py_stacks and \
            settings.py_wakers and not settings.stats else set()
        assert raw == want, settings


def test_the_safepoint_takes_every_number_from_bpfprog(preprocess):
    """bpf/safepoint.bpf.c likewise: it stops at an #error for each map size
    not given, safepoint_numbers() gives exactly those, and with them it builds."""
    flags = [f"-D{k}={v}" for k, v in bpfprog.safepoint_numbers(SETTINGS[0]).items()]
    assert preprocess(None, flags, safepoint_source()).returncode == 0
    for name in bpfprog.safepoint_numbers(SETTINGS[0]):
        p = preprocess(None, [f for f in flags if not f.startswith(f"-D{name}=")],
                       safepoint_source())
        assert p.returncode != 0 and f"{name} (" in p.stderr, (name, p.stderr[-300:])
    bare = preprocess(None, [], safepoint_source())
    needed = set(re.findall(r'#error "(CP_\w+) \(', bare.stderr))
    assert needed == set(bpfprog.safepoint_numbers(SETTINGS[0]))


def test_may_goto_only_with_py_stacks_and_as_the_kernel_or_override_says(monkeypatch):
    """The walk of every thread and the code objects' hash are compiled where the
    kernel has may_goto (6.9+), for --py-stacks alone: nothing else changes."""
    def switches(**kw: object) -> dict[str, str]:
        return bpfprog.switches(probes(), bpfprog.Settings(attach="multi", **kw))
    assert "CP_MAY_GOTO" in switches(py_stacks=True, may_goto=True)
    assert "CP_MAY_GOTO" not in switches(py_stacks=True, may_goto=False)
    assert "CP_MAY_GOTO" not in switches(may_goto=True)  # no --py-stacks: not a word of it
    # serve --duty (functions kept between slices): the stale entries' check
    assert "CP_DUTY" in switches(duty_exact=frozenset({"cudaMalloc"}))
    assert "CP_DUTY" not in switches()
    monkeypatch.setenv("CUDAPROBE_MAY_GOTO", "0")
    assert bpfprog.default_may_goto() is False
    monkeypatch.setenv("CUDAPROBE_MAY_GOTO", "1")
    assert bpfprog.default_may_goto() is True
    monkeypatch.delenv("CUDAPROBE_MAY_GOTO")
    monkeypatch.setattr(bpfprog, "kernel_version", lambda: (6, 8))
    assert bpfprog.default_may_goto() is False
    monkeypatch.setattr(bpfprog, "kernel_version", lambda: (6, 9))
    assert bpfprog.default_may_goto() is True
