"""Label budgets of the metrics (analysis.labels): the names that hold a label
are the busiest lately, ranked again at each snapshot, not the first seen; no
exported series ever goes down; memory stays bounded under a flood of names."""

from __future__ import annotations

from cudaprobe.analysis.labels import OTHER, LabelBudget
from cudaprobe.analysis.metrics import MAX_KERNELS, MAX_PROCESS_NAMES, MAX_PROCESSES, CallMetrics
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.targets.jobs import NO_JOB as J

from .test_metrics import call

S = 1_000_000_000


def test_a_flood_of_junk_names_before_a_busy_job_leaves_the_job_its_label():
    m = CallMetrics(alive=lambda pid: True)
    # a tenant's short processes, each named anew, each making one call
    m.add([call("cudaGetDeviceCount", process=f"junk{i:04d}", pid=1000 + i) for i in range(1000)])
    m.snapshot(now_ns=S)
    m.add([call("cudaMalloc", process="trainer", pid=7)] * 50)  # the real job: in `other` so far
    first = m.snapshot(now_ns=2 * S)  # ranked again: the job is the busiest
    assert ("cudaMalloc", "runtime", "trainer", *J) not in first.calls
    m.add([call("cudaMalloc", process="trainer", pid=7)] * 30)
    snap = m.snapshot(now_ns=3 * S)
    assert snap.calls[("cudaMalloc", "runtime", "trainer", *J)] == 30
    assert snap.calls[("cudaMalloc", "runtime", OTHER, *J)] == 50  # counted where it was
    assert sum(k[2] != OTHER for k in snap.calls) == MAX_PROCESSES


def test_every_exported_series_only_grows_and_every_call_is_in_one():
    m = CallMetrics(max_processes=3, alive=lambda pid: True)
    seen: dict[tuple, int] = {}  # each series' highest value exported, as Prometheus keeps it
    # which names are busy changes from one interval to the next
    busy = [["a", "b", "c", "d"], ["d", "e"], ["e", "f", "g"], ["a", "a", "b"], ["g"], ["c"]]
    total = 0
    for t, names in enumerate(busy * 3, start=1):
        calls = [call("cudaFree", process=n) for n in names for _ in range(t % 4 + 1)]
        m.add(calls)
        total += len(calls)
        snap = m.snapshot(now_ns=t * S)
        for key, n in snap.calls.items():
            assert n >= seen.get(key, 0), key  # never down
            seen[key] = n
        assert len(snap.calls) <= 3 + 1
    assert sum(seen.values()) == total


def test_the_labelled_keep_their_labels_on_a_tie():
    b = LabelBudget(limit=2, tracked=8)
    assert [b.label(n) for n in ("z", "y", "a", "b")] == ["z", "y", OTHER, OTHER]
    b.rank(S)
    assert (b.holds("z"), b.holds("y"), b.holds("a")) == ("z", "y", OTHER)


def test_rates_decay_so_past_bursts_give_way_to_present_work():
    b = LabelBudget(limit=1, tracked=4, half_life_s=60)
    b.label("old", 1000)
    b.rank(0)
    b.label("new", 10)
    b.rank(600 * S)  # ten half-lives later: old is worth under 1
    assert b.holds("new") == "new" and b.holds("old") == OTHER


def test_a_flood_of_names_is_bounded_and_the_busy_name_stays_tracked():
    m = CallMetrics(alive=lambda pid: True)
    m.add([call("cudaFree", process="trainer")] * 100)
    m.snapshot(now_ns=S)
    for chunk in range(20):  # 100,000 names, one call each
        m.add([call("cudaFree", process=f"j{chunk}-{i}") for i in range(5000)])
    budget = m._processes
    assert len(budget._rate) <= MAX_PROCESS_NAMES
    assert budget.known(("trainer", *J))
    snap = m.snapshot(now_ns=2 * S)
    assert snap.calls[("cudaFree", "runtime", "trainer", *J)] == 100
    assert len(m._calls) <= MAX_PROCESSES + 1 + MAX_PROCESS_NAMES  # series of names gone went


def kernel(name: str, ns: int) -> GpuWork:
    return GpuWork(pid=1, kind="kernel", start_ns=0, end_ns=ns, device=0, context=1, stream=1,
                   correlation=1, name=name)


def test_gpu_time_labels_go_to_the_kernels_with_the_most_gpu_time():
    m = CallMetrics(alive=lambda pid: True)
    m.add_gpu([kernel(f"tiny{i}", 1_000) for i in range(MAX_KERNELS + 10)])
    m.snapshot(now_ns=S)
    m.add_gpu([kernel("gemm", S)])  # the labels are taken: other, until ranked
    assert "gemm" not in m.snapshot(now_ns=2 * S).gpu_time
    m.add_gpu([kernel("gemm", S)])
    gpu = m.snapshot(now_ns=3 * S).gpu_time
    assert gpu["gemm"].count == 1 and gpu["gemm"].sum_ns == S
    assert gpu[OTHER].count == 10 + 1 and len(gpu) == MAX_KERNELS + 1
