"""serve labels each process's calls with its job: three copies of one
program, under one name, run in real cgroups made here as the kubelet,
slurm and a user would make them, with a kubelet log directory naming the
pod and container. Each copy's calls are counted on its own series with its
labels, exactly; the pod level under a user's own slice names no pod."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .conftest import expected_calls
from .running import Lines, Loop, build_loop, started
from .test_per_process import private_copy
from .test_serve_prometheus import free_port, renamed, stop
from .test_whole_tree import static_runtime_calls

pytestmark = pytest.mark.slow

UID = "1234abcd-1234-5678-9abc-def012345678"
CID_POD = "c0" * 32
CID_USER = "d1" * 32


def cgroup2_root() -> Path | None:
    """Where the unified cgroup hierarchy is mounted, if it is."""
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return Path(parts[1])
    return None


@pytest.fixture
def cgroups():
    """Makes cgroups under the unified hierarchy's root (skips where it cannot),
    and removes them, deepest first, after the test."""
    root = cgroup2_root()
    made: list[Path] = []
    probe = root / f"cudaprobe-test-{secrets.token_hex(4)}" if root else None
    try:
        probe.mkdir()
        probe.rmdir()
    except (OSError, AttributeError):
        pytest.skip("no writable cgroup2 hierarchy here")

    def make(relative: str) -> Path:
        path = root
        for level in relative.strip("/").split("/"):
            path = path / level
            if not path.exists():
                path.mkdir()
                made.append(path)
        return path

    yield make
    for path in reversed(made):
        try:
            path.rmdir()
        except OSError:
            pass


def kubelet_logs(tmp_path: Path) -> Path:
    """The kubelet's log directories as it makes them, naming the pod UID
    (team-a/trainer-0) and its container CID_POD (main)."""
    logs = tmp_path / "kubelet"
    (logs / "pods" / f"team-a_trainer-0_{UID}").mkdir(parents=True)
    (logs / "containers").mkdir()
    (logs / "containers" / f"trainer-0_team-a_main-{CID_POD}.log").write_text("")
    return logs


def metric_series(url: str, family: str) -> dict[tuple, float]:
    with urllib.request.urlopen(url, timeout=HANG_S) as r:
        text = r.read().decode()
    for f in text_string_to_metric_families(text):
        if f.name == family:
            return {tuple(sorted((k, v) for k, v in s.labels.items() if v)): s.value
                    for s in f.samples if s.name == f"{family}_total"}
    return {}


def test_each_process_is_counted_under_its_pod_container_slurm_job_and_rank(tmp_path, cgroups):
    tag = secrets.token_hex(3)
    pod = cgroups(f"kubepods-t{tag}.slice/kubepods-t{tag}-burstable.slice/"
                  f"kubepods-t{tag}-burstable-pod{UID.replace('-', '_')}.slice/"
                  f"cri-containerd-{CID_POD}.scope")
    slurm = cgroups(f"t{tag}.slice/slurmstepd.scope/job_4242/step_0/user/task_0")
    # a user's own slice, with levels named as the kubelet's: a container id, no pod
    user = cgroups(f"t{tag}-user.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
                   f"docker-{CID_USER}.scope")
    logs = kubelet_logs(tmp_path)

    name = f"job{secrets.token_hex(5)}"  # 13 characters: comm keeps 15
    exe = renamed(build_workload("runtime_calls.c"), tmp_path, name)
    target = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--comm", name, "--kubelet-logs",
                      str(logs), "-d", "120"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=HANG_S)
        runs = []
        for cgroup, env, loops in ((pod, {"RANK": "3"}, 2), (slurm, {"SLURM_PROCID": "1"}, 3),
                                   (user, {"RANK": "not a rank"}, 4)):
            # the shell moves itself into the cgroup, then becomes the program
            run = started(subprocess.Popen(
                ["sh", "-c", f'echo $$ > "$1/cgroup.procs" && exec "$2" {loops} 1', "sh",
                 str(cgroup), str(exe)],
                stdout=subprocess.PIPE, text=True, env={**os.environ, **env}))
            stdout, _ = run.communicate(timeout=HANG_S)
            assert run.returncode == 0
            runs.append(len(expected_calls(stdout)))
            err.wait_for(lambda s, pid=run.pid: f"pid {pid} ({name}) started under the name"
                         in s, "its probes")
        assert runs == [20, 30, 40]
        url = f"http://{target}/metrics"
        want = {
            ("k8s_namespace", "team-a", "k8s_pod", "trainer-0", "k8s_container", "main",
             "container_id", CID_POD[:12], "rank", "3"): 20,
            ("slurm_job", "4242", "rank", "1"): 30,
            ("container_id", CID_USER[:12]): 40,
        }
        got: dict = {}
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline:  # until a scrape has every call counted
            got = {}
            for labels, n in metric_series(url, "cudaprobe_calls").items():
                labels = dict(labels)
                if labels.pop("process", None) != name:
                    continue
                labels.pop("function"), labels.pop("api")
                key = tuple(x for k in ("k8s_namespace", "k8s_pod", "k8s_container",
                                        "container_id", "slurm_job", "rank") if k in labels
                            for x in (k, labels[k]))
                got[key] = got.get(key, 0) + n
            if sum(got.values()) >= sum(want.values()):
                break
            time.sleep(0.25)
        assert got == want, err.text()
    finally:
        stop(serve)


def test_the_node_daemon_labels_a_process_it_finds_by_its_calls(tmp_path, cgroups, libcudart):
    """No selection (the DaemonSet's serve): a process is found by its first
    call, its labels read then, while it runs; its calls after its exit are
    labelled the same."""
    tag = secrets.token_hex(3)
    pod = cgroups(f"kubepods-t{tag}.slice/kubepods-t{tag}-pod{UID.replace('-', '_')}.slice/"
                  f"cri-containerd-{CID_POD}.scope")
    logs = kubelet_logs(tmp_path)
    name = f"nod{secrets.token_hex(5)}"
    exe = renamed(build_loop("shared"), tmp_path, name)
    library, env = private_copy(tmp_path, libcudart)  # no other test's process takes a trap
    target = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--lib", library,
                      "--kubelet-logs", str(logs), "-d", "120"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    url = f"http://{target}/metrics"
    labels = {"k8s_namespace": "team-a", "k8s_pod": "trainer-0", "k8s_container": "main",
              "container_id": CID_POD[:12], "rank": "3"}

    def counted() -> tuple[float, float]:
        """This program's calls: with the pod's labels, and without."""
        mine = [(dict(k), n) for k, n in metric_series(url, "cudaprobe_calls").items()
                if dict(k).get("process") == name]
        with_labels = sum(n for k, n in mine if all(k.get(a) == v for a, v in labels.items()))
        return with_labels, sum(n for _, n in mine) - with_labels

    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=HANG_S)
        loop = Loop(["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$2" 5', "sh",
                     str(pod), str(exe)], env={**env, "RANK": "3"})
        deadline = time.monotonic() + HANG_S
        while counted()[0] == 0:  # its first calls counted, its labels read
            assert time.monotonic() < deadline, err.text()
            time.sleep(0.1)
        calls = 5 * (loop.stop() + 1)  # five calls an iteration, from 0
        while counted()[0] < calls and time.monotonic() < deadline:
            time.sleep(0.1)
        assert counted() == (calls, 0), err.text()
    finally:
        stop(serve)


def test_a_program_held_at_its_exec_is_labelled_with_the_rank_set_for_it(tmp_path):
    """A program with the CUDA runtime linked in is held at its exec, when /proc
    still shows its old image: the shell's environment, not the RANK the shell
    set for the program alone. Its labels are read from the environment its
    exec is giving it (the call's arguments, in its memory)."""
    name = f"stx{secrets.token_hex(5)}"
    exe = renamed(Path(static_runtime_calls()), tmp_path, name)
    target = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--comm", name, "-d", "120"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=HANG_S)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURM_PROCID")}
        run = started(subprocess.Popen(["sh", "-c", 'RANK=7 exec "$1" 2 1', "sh", str(exe)],
                                       stdout=subprocess.PIPE, text=True, env=env))
        stdout, _ = run.communicate(timeout=HANG_S)
        assert run.returncode == 0
        calls = len(expected_calls(stdout))
        err.wait_for(lambda s: "has CUDA linked in" in s and f"pid {run.pid} " in s,
                     "held at its exec")
        url = f"http://{target}/metrics"
        deadline = time.monotonic() + HANG_S
        while True:
            mine = {k: n for k, n in metric_series(url, "cudaprobe_calls").items()
                    if dict(k).get("process") == name}
            if sum(mine.values()) >= calls:
                break
            assert time.monotonic() < deadline, err.text()
            time.sleep(0.25)
        assert {dict(k).get("rank") for k in mine} == {"7"}, (mine, err.text())
    finally:
        stop(serve)
