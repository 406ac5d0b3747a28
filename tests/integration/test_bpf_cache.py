"""The compiled program kept (probe/bpfcache.py): a later session loads it
without compiling (bcc's compiler is never called) and traces as a session
that compiled; an entry changed, cut short, another key's, a link, or one
someone else could write is never loaded: the program is compiled again and
the entry replaced by a sound one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cudaprobe.catalogue.functions import RUNTIME_FUNCTIONS
from cudaprobe.probe import bpfcache, bpfprog, load, uprobe_multi
from cudaprobe.probe.plan import plan_probes

from ..conftest import NOBODY, build_workload
from .conftest import trace_jsonl
from .test_stats import LOOP, stats_json

# what differs between two runs of one workload
VOLATILE = ("time_ms", "ts_ns", "pid", "tid", "duration_ns", "parent")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache of the test's own (root's, as /var/cache/cudaprobe is)."""
    where = tmp_path / "cache"
    monkeypatch.setenv(bpfcache.CACHE_VAR, str(where))
    return where


def entries(cache: Path) -> list[Path]:
    return sorted((cache / bpfcache.SUBDIR).glob("*.bpf"))


def rows(calls: list[dict]) -> list[dict]:
    return [{k: v for k, v in c.items() if k not in VOLATILE} for c in calls]


@pytest.mark.parametrize("attach", ["multi", "perf"])
def test_a_second_trace_loads_the_kept_program_and_its_rows_are_the_same(tmp_path, cache,
                                                                         libcudart, attach):
    """With uprobe_multi links (two programs), and with a perf event per probe
    (a program pair per probe: the workload's functions only, 20 perf probes)."""
    exe = build_workload("runtime_calls.c")  # run at the same addresses each time (setarch -R)
    env = {**os.environ, bpfcache.CACHE_VAR: str(cache), "CUDAPROBE_ATTACH": attach}
    events = ["-e", ",".join(LOOP)] if attach == "perf" else []
    runs = []
    for run in ("compiled", "cached"):
        (tmp_path / run).mkdir()
        calls, summary, proc = trace_jsonl(tmp_path / run, "--lib", str(libcudart), *events,
                                           command=["setarch", "-R", str(exe), "2"], env=env)
        assert proc.returncode == 0, proc.stderr
        assert summary["bpf_program"] == run, proc.stderr
        counts = {name: (e["calls"], e["errors"]) for name, e in summary["by_event"].items()}
        runs.append((rows(calls), counts, summary["calls"], summary["lost_total"]))
    (entry,) = entries(cache)
    st = entry.stat()
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    assert runs[0] == runs[1]
    assert len(runs[1][0]) == runs[1][2] == 20 and runs[1][3] == 0


def test_stats_from_the_kept_program_counts_as_compiled(tmp_path, cache, libcudart):
    """The stats program: per-CPU arrays and hashes read through bcc's tables."""
    exe = build_workload("runtime_calls.c")
    env = {**os.environ, bpfcache.CACHE_VAR: str(cache)}
    reports, kept = [], []
    for run in ("compiled.json", "cached.json"):
        report, proc = stats_json(tmp_path, run, "--lib", str(libcudart),
                                  command=[str(exe), "5", "2"], env=env)
        assert proc.returncode == 0, proc.stderr
        reports.append({f["event"]: (f["count"], f["errors"]) for f in report["functions"]})
        kept += [e.stat().st_ino for e in entries(cache)]
    # one entry, never replaced: a compile would have written it again (a new file)
    assert len(kept) == 2 and kept[0] == kept[1]
    assert reports[0] == reports[1] and len(reports[0]) == 10
    assert all(v == (10, {"cudaErrorInsufficientDriver": 10}) for v in reports[1].values())


@pytest.fixture(scope="module")
def program_text(libcudart) -> tuple[bytes, list[str]]:
    """The trace program of a plan of the runtime's cudaMalloc, as load_program
    compiles it (with the pid filter: its tracepoints too)."""
    plan = plan_probes([f for f in RUNTIME_FUNCTIONS if f.name == "cudaMalloc"],
                       [str(libcudart)])
    settings = bpfprog.Settings(filter_pid=True, per_process=True, attach="multi")
    return bpfprog.source(settings).encode(), bpfprog.cflags(plan.probes, settings)


def compiles(monkeypatch) -> list[int]:
    """Counts bcc's compiles from now on (bcc.BPF made from C)."""
    bcc = load.import_bcc()
    count = []
    real = bcc.BPF.__init__

    def counted(self, *args, **kwargs):
        count.append(1)
        real(self, *args, **kwargs)
    monkeypatch.setattr(bcc.BPF, "__init__", counted)
    return count


def load_once(program_text) -> tuple[str, dict]:
    """Load the program, use it as a session does, clean up: (how it was had,
    what it showed)."""
    bcc = load.import_bcc()
    bpf = load.load_text(bcc, *program_text)
    try:
        seen = {"tracepoints": sorted(bpf.tracepoint_fds)}
        probes = bpf["probes"]
        probes[probes.Key(0)] = probes.Leaf(*([1] * len(probes.Leaf._fields_)))
        seen["probe0"] = bytes(probes[probes.Key(0)])
        seen["events"] = bpf["events"].map_fd > 0
        fn = bpf.load_func(b"cp_enter", bpf.KPROBE,
                           attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
        seen["cp_enter"] = fn.fd > 0
        seen["owned"] = len(bpf["owned"])
        with pytest.raises(KeyError):
            bpf["no_such_map"]
        return ("cached" if getattr(bpf, "from_cache", False) else "compiled"), seen
    finally:
        bpf.cleanup()


def test_the_kept_program_is_loaded_without_compiling(cache, program_text, monkeypatch):
    count = compiles(monkeypatch)
    first = load_once(program_text)
    assert first[0] == "compiled" and len(count) == 1
    second = load_once(program_text)
    assert second[0] == "cached" and len(count) == 1  # bcc compiled nothing
    assert second[1] == first[1]
    assert second[1]["tracepoints"] == [b"task:task_newtask", b"task:task_rename"]
    key = bpfcache.cache_key(*program_text, bpfcache.bcc_identity(load.import_bcc()))
    assert entries(cache) == [cache / bpfcache.SUBDIR / bpfcache.entry_name(key)]


def tamper(entry: Path, how: str, other: Path) -> None:
    data = entry.read_bytes()
    if how == "flipped":  # a byte of the last function's instructions
        entry.write_bytes(data[:-20] + bytes([data[-20] ^ 0x10]) + data[-19:])
    elif how == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif how == "foreign":  # another program's entry, under this one's name
        entry.write_bytes(other.read_bytes())
    elif how == "link":  # to a sound entry of this key, kept elsewhere
        kept = entry.with_name("elsewhere")
        entry.rename(kept)
        entry.symlink_to(kept)
    elif how == "writable":
        entry.chmod(0o666)
    elif how == "not root's":
        os.chown(entry, NOBODY, NOBODY)


@pytest.mark.parametrize("how", ["flipped", "truncated", "foreign", "link", "writable",
                                 "not root's"])
def test_an_entry_not_as_kept_is_compiled_again_and_replaced(cache, program_text, monkeypatch,
                                                             how):
    other_text = (program_text[0], [f for f in program_text[1] if f != "-DCP_FILTER_PID=1"])
    count = compiles(monkeypatch)
    load_once(other_text)
    (other,) = entries(cache)
    expected = load_once(program_text)
    entry = next(e for e in entries(cache) if e != other)
    sound = entry.read_bytes()
    tamper(entry, how, other)
    assert load_once(program_text) == expected
    assert len(count) == 3  # compiled again, not loaded
    st = entry.lstat()  # replaced: a regular file of root's, sound again
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    key = bpfcache.cache_key(*program_text, bpfcache.bcc_identity(load.import_bcc()))
    assert bpfcache.unpack(key, entry.read_bytes()) == bpfcache.unpack(key, sound)
    assert load_once(program_text)[0] == "cached" and len(count) == 3


def test_a_cache_someone_else_can_write_is_not_used(tmp_path, program_text, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv(bpfcache.CACHE_VAR, str(shared / "cache"))
    count = compiles(monkeypatch)
    assert load_once(program_text)[0] == "compiled"
    assert load_once(program_text)[0] == "compiled" and len(count) == 2
    assert not (shared / "cache").exists()
