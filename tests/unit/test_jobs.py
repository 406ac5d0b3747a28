"""targets.jobs: a process's job labels from its cgroup, the kubelet's log
directories and its rank variable; what a process could have made up itself
names no one else's job. And the metrics carry them."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import pytest

from cudaprobe.analysis.metrics import EXIT_SLACK_NS, JOB_GRACE_NS, OTHER_PROCESS, CallMetrics
from cudaprobe.output.prometheus import MetricsServer
from cudaprobe.targets import jobs
from cudaprobe.targets.jobs import NO_JOB, Jobs, KubeletNames, parse_cgroup, rank_of

from .test_metrics import call
from .test_prometheus import free_port

S = 1_000_000_000
UID = "1234abcd-1234-5678-9abc-def012345678"
CID = "ab" * 32
SYSTEMD_POD = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"


@pytest.mark.parametrize("text, expected", [
    # the kubelet's systemd driver, containerd
    (f"0::/kubepods.slice/kubepods-burstable.slice/{SYSTEMD_POD}/cri-containerd-{CID}.scope\n",
     (UID, CID, "")),
    # its cgroupfs driver, on a v1 hierarchy after an empty unified one
    (f"0::/\n4:memory:/kubepods/burstable/pod{UID}/{CID}\n", (UID, CID, "")),
    (f"0::/kubepods.slice/{SYSTEMD_POD}/crio-{CID}.scope\n", (UID, CID, "")),
    (f"0::/system.slice/docker-{CID}.scope\n", ("", CID, "")),
    (f"0::/machine.slice/libpod-{CID}.scope/container\n", ("", CID, "")),
    ("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", ("", "", "4242")),
    ("12:memory:/slurm/uid_1000/job_99/step_batch/task_0\n", ("", "", "99")),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", ("", "", "")),
    ("", ("", "", "")),
    ("garbage\n:::\n0::\n", ("", "", "")),
    # as serve sees it from a pod's cgroup namespace: from the common ancestor up
    (f"0::/../../{SYSTEMD_POD}/cri-containerd-{CID}.scope\n", (UID, CID, "")),
    ("0::/../../../../user.slice/user-1000.slice/session-3.scope\n", ("", "", "")),
])
def test_the_cgroup_names_a_pod_a_container_and_a_slurm_job(text, expected):
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize("text, expected", [
    # a user's own delegated slice: a pod level there names no pod; the container
    # id is the user's own process's, nothing more
    (f"0::/user.slice/user-1000.slice/user@1000.service/{SYSTEMD_POD}/docker-{CID}.scope\n",
     ("", CID, "")),
    # a job_ level a job made under its container, or under its own task
    (f"0::/kubepods.slice/{SYSTEMD_POD}/cri-containerd-{CID}.scope/slurm/job_7\n",
     (UID, CID, "")),
    ("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0/slurm/job_7\n",
     ("", "", "42")),
    # a second pod level, under the first
    (f"0::/kubepods.slice/{SYSTEMD_POD}/kubepods-pod{'0' * 8}-0000-0000-0000-{'0' * 12}"
     f".slice/{CID}\n", (UID, CID, "")),
    # job_ with no slurm level above it
    ("0::/system.slice/job_5/step_0\n", ("", "", "")),
])
def test_levels_a_process_could_have_made_name_no_one_elses_job(text, expected):
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize("environ, rank", [
    (b"HOME=/root\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=4\0", "3"),
    (b"SLURM_PROCID=12\0RANK=7\0", "7"),  # RANK (torchrun's) first
    (b"SLURM_PROCID=12\0", "12"),
    (b"RANK=x1\0SLURM_PROCID=4\0", "4"),  # not a number: the next variable's
    (b"RANK=1234567890\0", ""),  # 10 digits: not a rank
    (b"RANK=5\0WORLD_SIZE=4\0", ""),  # past the world's size
    (b"RANK=1\0RANK=2\0", "1"),  # the first, as getenv gives it
    (b"RANK\0OMPI_COMM_WORLD_RANK=0", "0"),
    (b"RANK=\x1b[31m1\0", ""),
    (b"\xff\xfe=1\0", ""),
    (b"", ""),
])
def test_the_rank_is_a_number_the_launcher_set(environ, rank):
    assert rank_of(environ) == rank


def kubelet_dir(tmp_path, pods: list[str], logs: list[str]):
    for name in pods:
        (tmp_path / "pods" / name).mkdir(parents=True)
    (tmp_path / "containers").mkdir(exist_ok=True)
    for name in logs:
        (tmp_path / "containers" / name).write_text("")
    return tmp_path


def test_the_kubelets_directories_name_pods_and_containers(tmp_path):
    other = "9" * 64
    root = kubelet_dir(tmp_path, [f"team-a_trainer-0_{UID}", f"Bad_NS_{'5' * 8}-0000-0000-0000-"
                                  f"{'0' * 12}", "junk"],
                       [f"trainer-0_team-a_main-{CID}.log", f"x_y_Evil\x1bName-{other}.log"])
    clock = [0.0]
    names = KubeletNames(str(root), clock=lambda: clock[0])
    assert names.pod(UID) == ("team-a", "trainer-0")
    assert names.container(CID) == "main"
    assert names.pod(f"{'5' * 8}-0000-0000-0000-{'0' * 12}") == ("", "")  # not a k8s name
    assert names.container(other) == ""
    # a pod made since: listed again on a miss, at most each RESCAN_S
    late = "feedbeef-0000-0000-0000-000000000000"
    (root / "pods" / f"team-b_eval-1_{late}").mkdir()
    assert names.pod(late) == ("", "")
    clock[0] += jobs.RESCAN_S
    assert names.pod(late) == ("team-b", "eval-1")
    assert KubeletNames(str(tmp_path / "none")).pod(UID) == ("", "")


def test_a_running_process_has_its_rank_read_once_and_forgotten_at_its_exit():
    env = {**os.environ, "RANK": "5"}
    child = subprocess.Popen([sys.executable, "-c", "print('up', flush=True); "
                              "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        # running: Popen returns once exec has closed the child's descriptors, a moment
        # before the kernel has set where its new environment lies (read empty till then)
        assert child.stdout.readline() == b"up\n"
        source = Jobs("/nonexistent")
        labels = source.of(child.pid)
        assert labels[jobs.JOB_LABELS.index("rank")] == "5"
        assert labels[:3] == ("", "", "")  # no pod here
        assert source.of(child.pid) is labels  # read once
    finally:
        child.communicate(b"")
    # told of again once gone (a short program, linked at its exec, then found by
    # the scan of names after its exit): what was read stands
    assert source.refresh(child.pid) is labels
    source.forget(child.pid)
    assert source.of(child.pid) == NO_JOB  # gone: nothing to read


class FakeJobs:
    def __init__(self, by_pid: dict[int, tuple[str, ...]]) -> None:
        self.by_pid, self.forgotten = by_pid, []

    def of(self, pid: int) -> tuple[str, ...]:
        return self.by_pid.get(pid, NO_JOB)

    def forget(self, pid: int) -> None:
        self.forgotten.append(pid)


def test_calls_errors_and_live_bytes_carry_the_job_labels():
    a = ("team-a", "trainer-0", "main", CID[:12], "", "0")
    b = ("", "", "", "", "77", "1")
    source = FakeJobs({7: a, 8: b})
    alive = {7, 8, 9}
    now = [0]
    m = CallMetrics(alive=lambda pid: pid in alive, jobs=source, clock=lambda: now[0])
    m.add([call("cudaMalloc", pid=7, devPtr="0x1000", size=4096),
           call("cudaMalloc", pid=8, ret=2),
           call("cudaMalloc", pid=9)])
    snap = m.snapshot(now_ns=10**9)
    assert snap.calls == {("cudaMalloc", "runtime", "app", *a): 1,
                          ("cudaMalloc", "runtime", "app", *b): 1,
                          ("cudaMalloc", "runtime", "app", *NO_JOB): 1}
    assert snap.errors == {("cudaMalloc", "cudaErrorInsufficientDriver", "app", *b): 1}
    assert snap.live_bytes[("app", *a, "device")] == 4096
    # gone: its labels kept JOB_GRACE_NS, then forgotten
    alive.discard(7)
    now[0] = 2 * S
    m.add([call("cudaFree", pid=8, t=2 * S)])
    assert source.forgotten == []
    now[0] = 3 * S + JOB_GRACE_NS
    m.add([call("cudaFree", pid=8, t=3 * S + JOB_GRACE_NS)])
    assert source.forgotten == [7]


def test_a_process_seen_gone_keeps_its_job_labels_for_its_calls_fed_late():
    """The decoder behind: a process seen gone at 30 s has calls made at 5-25 s
    still to be fed. They carry its job labels (they were lost to an unlabelled
    series: a spike of calls of no job in a dashboard's rate); its labels are
    forgotten only JOB_GRACE_NS after the calls fed pass the moment it was seen gone."""
    a = ("team-a", "trainer-0", "main", CID[:12], "", "0")
    source = FakeJobs({7: a, 8: NO_JOB})
    alive = {7, 8}
    now = [S]
    m = CallMetrics(alive=lambda pid: pid in alive, jobs=source, clock=lambda: now[0])
    m.add([call("cudaFree", pid=7, t=S)])
    alive.discard(7)
    now[0] = 30 * S
    for t in range(5, 30, 5):
        m.add([call("cudaFree", pid=7, t=t * S), call("cudaFree", pid=8, t=t * S)])
    assert source.forgotten == []
    assert m.snapshot(now_ns=30 * S).calls[("cudaFree", "runtime", "app", *a)] == 6
    now[0] = 30 * S + JOB_GRACE_NS
    m.add([call("cudaFree", pid=8, t=30 * S + EXIT_SLACK_NS)])
    assert source.forgotten == []  # taken as exited now: its labels kept JOB_GRACE_NS
    m.add([call("cudaFree", pid=8, t=31 * S + JOB_GRACE_NS)])
    assert source.forgotten == [7]


def test_the_rest_has_no_job_labels():
    m = CallMetrics(max_processes=1, alive=lambda pid: True,
                    jobs=FakeJobs({1: ("ns", "p", "c", "", "", ""), 2: NO_JOB}))
    m.add([call("cudaFree", pid=1), call("cudaFree", pid=2)])
    assert set(m.snapshot(now_ns=1).calls) == {("cudaFree", "runtime", "app", "ns", "p", "c",
                                                "", "", ""),
                                               ("cudaFree", "runtime", *OTHER_PROCESS)}


def test_the_exposition_has_a_processs_job_labels_and_no_empty_ones():
    now = [0]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0],
                    jobs=FakeJobs({7: ("team-a", "trainer-0", "main", CID[:12], "", "3")}))
    m.add([call("cudaMalloc", pid=7, devPtr="0x1000", size=4096), call("cudaMalloc", pid=8)])
    now[0] = S  # scraped with nothing fed for a second: every call made is in
    with MetricsServer(m, "127.0.0.1", free_port()) as server:
        server.ready.set()
        with urllib.request.urlopen(server.url, timeout=30) as r:
            text = r.read().decode()
    assert ('cudaprobe_calls_total{api="runtime",container_id="abababababab",'
            'function="cudaMalloc",k8s_container="main",k8s_namespace="team-a",'
            'k8s_pod="trainer-0",process="app",rank="3"} 1.0') in text
    assert 'cudaprobe_calls_total{api="runtime",function="cudaMalloc",process="app"} 1.0' in text
    assert '=""' not in text
    assert 'cudaprobe_memory_live_bytes{container_id="abababababab",k8s_container="main"' in text


def test_an_exec_s_environment_is_read_from_its_pointers_bounded(tmp_path, monkeypatch):
    """_strings_at on a file standing for memory (offsets for addresses): the
    strings up to the NULL pointer, a string cut at its NUL, at most
    MAX_ENV_VARS of them; a process not inside an exec has none."""
    import struct  # noqa: PLC0415
    strings = [b"RANK=7", b"HOME=/root", b"X=" + b"y" * 100]
    blob, offsets, at = b"", [], 4096
    for s in strings:
        offsets.append(at + len(blob))
        blob += s + b"\0"
    mem = tmp_path / "mem"
    mem.write_bytes(struct.pack(f"<{len(offsets) + 2}Q", *offsets, 0, 99).ljust(4096, b"\0")
                    + blob)
    fd = os.open(mem, os.O_RDONLY)
    try:
        env = jobs._strings_at(fd, 0)
        assert env == b"\0".join(strings) + b"\0"
        assert jobs.launcher_rank(env) == (7, None)
        monkeypatch.setattr(jobs, "MAX_ENV_VARS", 2)
        assert jobs._strings_at(fd, 0) == b"RANK=7\0HOME=/root\0"
        monkeypatch.setattr(jobs, "MAX_ENVIRON", 10)  # bytes in all: the first string only
        assert jobs._strings_at(fd, 0) == b"RANK=7\0"
    finally:
        os.close(fd)
    with jobs.proc_dir(os.getpid()) as us:
        assert jobs.exec_environment(us) is None  # running, not in an exec
