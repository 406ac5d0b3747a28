"""The OCI image of scripts/build-image, run as the DaemonSet runs it, read
from deploy/kubernetes/daemonset.yaml: its capabilities and no others, its
seccomp profile (deploy/seccomp), a read-only root with its emptyDirs as
tmpfs, no privilege escalation, the host's pid namespace, tracefs read-only
and the host's library directories (here the stand-ins) read-only, against
fleet_node running on the host (not in a container): doctor passes, `trace
--pid` records the host process's calls, serve's metrics are scraped, and
serve --gpu-time puts the image's GPU-time library into a host process.

The image is built once for the module (the root file system is cached in
/var/cache/cudaprobe/image: a machine's first build installs Debian's
packages into it, about a minute alone; a later one, from any checkout, adds
cudaprobe and imports, about 30 s).
"""

from __future__ import annotations

import collections
import json
import os
import resource
import secrets
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from cudaprobe import __version__
from cudaprobe.targets.cupti import cuda_home

from ..conftest import REPO, build_workload
from .conftest import build_cuda_workload
from .fleet import build_fleet_stub, fleet_node
from .memstub import build_memstub
from .running import Lines
from .test_serve_prometheus import WAIT_S, free_port

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

IMAGE = f"cudaprobe:{__version__}"
BUILD_S = 1800  # a first build on a new machine: packages downloaded and unpacked
# bounded waits for what a loaded machine does slowly (a container start, a drain)
SLOW_S = 300
CALLS_PER_ROUND = 34  # fleet_node's runtime calls in one round


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("dpkg") is None or shutil.which("apt-get") is None:
        pytest.skip("scripts/build-image builds from Debian's packages: needs apt and dpkg")
    p = subprocess.run(["bash", str(REPO / "scripts" / "build-image")], capture_output=True,
                       text=True, timeout=BUILD_S)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"built {IMAGE}: " in p.stdout
    return IMAGE


# What this machine allows: runc (crun refuses cgroups in hybrid mode), and limits
# no higher than ours (podman asks for more, which needs CAP_SYS_RESOURCE)
PODMAN = ["podman", "--runtime", "runc", "run", "--ulimit", "nofile={}:{}".format(
    *resource.getrlimit(resource.RLIMIT_NOFILE)), "--ulimit", "nproc=4096:4096"]


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> dict[str, Path]:
    """Copies of the stand-in libraries of this module's own: serve probes them
    in every process, and tests beside this one run the shared ones."""
    where = tmp_path_factory.mktemp("stubs")
    made = {name: Path(shutil.copytree(built, where / name))
            for name, built in (("fleetstub", build_fleet_stub()), ("memstub", build_memstub()))}
    # the kubelet's log directories, where this machine is no Kubernetes node
    made["kubelet"] = where / "kubelet"
    for sub in ("pods", "containers"):
        (made["kubelet"] / sub).mkdir(parents=True)
    return made


DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"
SECCOMP_DIR = REPO / "deploy" / "seccomp"


def as_the_daemonset_runs_it(kubelet: Path) -> list[str]:
    """podman's options for what daemonset.yaml gives its container; the
    kubelet's directories from `kubelet` where the host has none."""
    pod = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert pod["hostPID"] is True and context["privileged"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"]["type"] == "Localhost"
    profile = SECCOMP_DIR / Path(context["seccompProfile"]["localhostProfile"]).name
    options = ["--pid=host", "--read-only", "--security-opt", "no-new-privileges",
               "--cap-drop=all",
               "--cap-add=" + ",".join(f"CAP_{c}" for c in context["capabilities"]["add"]),
               "--security-opt", f"seccomp={profile}"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            options += ["--tmpfs", mount["mountPath"]]
        elif mount["name"] != "driver":  # the host's driver: the stand-ins below instead
            assert mount["readOnly"] is True, mount
            host = Path(volume["hostPath"]["path"])
            if mount["name"].startswith("kubelet-") and not host.is_dir():
                host = kubelet / host.name
            options += ["-v", f"{host}:{mount['mountPath']}:ro"]
    return options


def podman_run(stubs: dict[str, Path], *args: str, name: str | None = None) -> list[str]:
    """`podman run` as the DaemonSet runs the pod, the host's libraries (here
    the stand-ins) under /host, read-only; the host's network, for the test to
    scrape (the pod has its own)."""
    return [*PODMAN, "--rm", *as_the_daemonset_runs_it(stubs["kubelet"]), "--network=host",
            *(["--name", name] if name else []),
            "-v", f"{stubs['fleetstub']}:/host/fleetstub:ro",
            "-v", f"{stubs['memstub']}:/host/memstub:ro", *args]


HOST_LIBS = ("--lib", "/host/fleetstub/libcudart.so.13", "--lib", "/host/memstub/libcuda.so.1")


class Node:
    """fleet_node on the host, a round of calls per send()."""

    def __init__(self, stubs: dict[str, Path]) -> None:
        # the module's copies first (LD_LIBRARY_PATH wins over the copies' RUNPATH)
        env = {**os.environ, "LD_LIBRARY_PATH": f"{stubs['fleetstub']}:{stubs['memstub']}"}
        self.proc = subprocess.Popen([str(fleet_node())], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.out = Lines(self.proc.stdout)
        self.rounds = 0

    def round(self) -> None:
        self.rounds += 1
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        self.out.wait_for(lambda s: s == f"round {self.rounds}", f"round {self.rounds}")

    def end(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=WAIT_S) == 0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_doctor_passes(image, stubs):
    p = subprocess.run(podman_run(stubs, image, "doctor", "-f", "json", *HOST_LIBS),
                       capture_output=True, text=True, timeout=SLOW_S)
    assert p.returncode == 0, p.stdout + p.stderr
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert [n for n, c in checks.items() if c["status"] == "fail"] == []
    assert checks["bcc"]["status"] == "ok"
    # the capabilities given, not privileged's: uprobe_multi links attach with them
    assert checks["privileges"]["found"] == "root, with CAP_BPF, CAP_PERFMON"
    assert checks["attach"]["status"] == "ok" and "uprobe_multi" in checks["attach"]["found"]
    assert checks["pid namespace"]["status"] == "ok"  # the host's
    # Debian's headers in the image, whatever the host's kernel
    assert "/usr/src/linux-headers-" in checks["kernel headers"]["found"]
    assert checks["CUDA library"]["status"] == "ok", checks["CUDA library"]
    if (cuda_home() / "include" / "cupti.h").is_file():  # built into the image, here
        assert checks["GPU time"]["found"].startswith("shipped with cudaprobe ("), checks


def test_trace_pid_of_a_host_process(image, stubs, tmp_path):
    node = Node(stubs)
    trace = subprocess.Popen(
        podman_run(stubs, "-v", f"{tmp_path}:/out", image, "trace", "--pid", str(node.proc.pid),
                   "-o", "/out/calls.jsonl"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(trace.stderr)
    try:
        err.wait_for(lambda s: "attached to" in s, "attached to", timeout=SLOW_S)
        node.round()
        node.end()  # trace --pid ends with its process
        assert trace.wait(timeout=SLOW_S) == 0, err.text()
    finally:
        node.kill()
        if trace.poll() is None:
            trace.kill()
    rows = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    calls, summary = rows[:-1], rows[-1]["summary"]
    runtime = [c for c in calls if c["api"] == "runtime"]
    assert len(runtime) == CALLS_PER_ROUND, err.text()
    assert {c["pid"] for c in calls} == {node.proc.pid}  # the host's pid
    copies = [c["args"] for c in runtime if c["event"] == "cudaMemcpy"]
    assert collections.Counter((a["count"], a["kind"]) for a in copies) == {
        (4096, "HostToDevice"): 8, (1024, "DeviceToHost"): 8}
    failed = [c for c in runtime if c["ret"]]
    assert [(c["event"], c["args"]["size"]) for c in failed] == [("cudaMalloc", 1 << 41)]
    assert summary["lost_total"] == 0


def scrape(url: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_serve_is_scraped(image, stubs):
    port = free_port()
    name = f"cudaprobe-test-{secrets.token_hex(4)}"
    serve = subprocess.Popen(
        podman_run(stubs, image, "serve", "--prometheus", f"127.0.0.1:{port}", *HOST_LIBS,
                   name=name),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    node = None
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=SLOW_S)
        node = Node(stubs)
        node.round()
        node.round()
        url = f"http://127.0.0.1:{port}/metrics"
        process = ("process", "fleet_node")
        want = (("cudaprobe_calls_total", (("api", "runtime"), ("function", "cudaMalloc"),
                                           process)), 2 * 4)
        live = ("cudaprobe_memory_live_bytes", (("kind", "device"), process))
        deadline = time.monotonic() + SLOW_S
        while True:  # serve counts what its reader has read: a moment behind the calls
            samples = scrape(url)
            if samples.get(want[0]) == want[1] and samples.get(live) == 2 * (2 << 20):
                break
            assert time.monotonic() < deadline, samples
            time.sleep(0.25)
        assert samples[("cudaprobe_call_errors_total", (("error", "cudaErrorMemoryAllocation"),
                                                        ("function", "cudaMalloc"), process))] == 2
        copied = ("cudaprobe_memcpy_bytes_total", (("api", "runtime"), ("kind", "HostToDevice")))
        assert samples[copied] == 2 * 8 * 4096
        node.end()
        assert subprocess.run(["podman", "stop", "-t", "60", name], capture_output=True,
                              timeout=SLOW_S).returncode == 0
        assert serve.wait(timeout=SLOW_S) == 0, err.text()
        err._thread.join(timeout=WAIT_S)
        assert ", 0 lost" in err.text()
    finally:
        if node is not None:
            node.kill()
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=60)
        if serve.poll() is None:
            serve.kill()


def test_serve_gpu_time_puts_the_image_s_library_into_a_host_process(
        image, stubs, tmp_path, libcudart, libcuda):
    """serve --gpu-time as the gpu-time component runs it: the GPU-time library
    the image was built with (it has no CUDA headers to build one) goes into
    a process on the host, which records through its own libcupti (here the
    stand-in, preloaded: the host's path is not the container's); its
    records are read across the namespaces, the kernel in the metrics once
    it exits; its output and exit status are an untraced run's."""
    exe = build_cuda_workload("inject_target.c", libcuda)
    lib = tmp_path / "cudart"
    lib.mkdir()
    shutil.copy(libcudart, lib / "libcudart.so.13")  # the test's own: no other test's traps
    cupti = tmp_path / "cupti" / "libcupti.so.13"
    cupti.parent.mkdir()
    shutil.copy(build_workload("fake_libcupti.c", "libcupti-fake.so",
                               extra=["-shared", "-fPIC"]), cupti)
    target = subprocess.Popen([str(exe), "1", "0"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "LD_LIBRARY_PATH": str(lib),
                                   "LD_PRELOAD": str(cupti)})
    assert target.stdout.readline().startswith("ready")
    port = free_port()
    name = f"cudaprobe-test-{secrets.token_hex(4)}"
    serve = subprocess.Popen(
        podman_run(stubs, "-v", f"{lib}:/host/cudart:ro", image, "serve", "--prometheus",
                   f"127.0.0.1:{port}", "--lib", "/host/cudart/libcudart.so.13", "-e",
                   "cudaGetDeviceCount", "--gpu-time", name=name),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    try:
        err.wait_for(lambda s: f"the GPU-time library is recording in pid {target.pid} " in s,
                     "recording", timeout=SLOW_S)
        target.stdin.close()
        assert target.stdout.read() == "malloc ok\ndlopen ok\ncuda ok\n"
        assert target.wait(timeout=SLOW_S) == 0
        kernel = ("cudaprobe_gpu_kernel_duration_seconds_count",
                  (("kernel", "fake_attached_kernel"),))
        deadline = time.monotonic() + SLOW_S
        while True:  # its last records, flushed as it exits, read
            samples = scrape(f"http://127.0.0.1:{port}/metrics")
            if samples.get(kernel):
                break
            assert time.monotonic() < deadline, (samples, err.text())
            time.sleep(0.25)
        assert samples[("cudaprobe_gpu_time_processes_total", ())] == 1
        assert subprocess.run(["podman", "stop", "-t", "60", name], capture_output=True,
                              timeout=SLOW_S).returncode == 0
        assert serve.wait(timeout=SLOW_S) == 0, err.text()
    finally:
        if target.poll() is None:
            target.kill()
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=60)
        if serve.poll() is None:
            serve.kill()
    assert "Traceback" not in err.text() and "no GPU time" not in err.text()


REFUSALS = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
for name, number, args in (("unshare", 272, (0x10000000,)), ("io_uring_setup", 425, (1, 0)),
                           ("userfaultfd", 323, (0,)), ("keyctl", 250, (0, 0))):
    ret = libc.syscall(number, *args)
    print(name, errno.errorcode.get(ctypes.get_errno(), ret) if ret == -1 else "allowed")
"""


def test_the_seccomp_profile_refuses_what_a_tracer_never_needs(image, stubs):
    """Unprivileged doors into the kernel (a user namespace, io_uring,
    userfaultfd, keyrings) stay shut to a compromised serve: ENOSYS."""
    p = subprocess.run(podman_run(stubs, "--entrypoint", "python3", image, "-c", REFUSALS),
                       capture_output=True, text=True, timeout=SLOW_S)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:-1] == [f"{n} ENOSYS" for n in (
        "unshare", "io_uring_setup", "userfaultfd", "keyctl")]


def test_on_ubuntu_the_image_is_built_from_debian_s_mirror(tmp_path):
    """On a machine that is not Debian (here /etc/os-release said to be Ubuntu's,
    in a mount namespace of the build's own), the packages come from Debian's
    mirror and release, read with Debian's keyring, not from the machine's own
    sources: the build says so with -n, having read Debian's package lists."""
    if shutil.which("dpkg") is None or shutil.which("unshare") is None:
        pytest.skip("needs apt, dpkg and unshare")
    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_CODENAME=noble\n')
    build = [str(REPO / "scripts" / "build-image"), "-n"]
    env = {**os.environ, "CUDAPROBE_IMAGE_CACHE": str(tmp_path / "cache")}
    p = subprocess.run(["unshare", "-m", "sh", "-c",
                        'mount --bind "$0" /etc/os-release && exec bash "$@"', str(release),
                        *build], capture_output=True, text=True, timeout=SLOW_S, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("build-image: Debian bookworm from http://deb.debian.org/debian, "
                               "kernel headers linux-headers-"), p.stdout
    assert (tmp_path / "cache" / "debian-bookworm.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://deb.debian.org/debian bookworm main\n")
    bad = subprocess.run(["bash", build[0], "-m", "ftp://mirror"], capture_output=True,
                         text=True, timeout=SLOW_S, env=env)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == ("build-image: -m wants a mirror's URL (http://, https:// or file:/): "
                          "ftp://mirror\n")
    unknown = subprocess.run(["bash", build[0], "-x"], capture_output=True, text=True,
                             timeout=SLOW_S, env=env)
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (
        2, "", f"build-image: unknown option -x (see: {build[0]} -h)\n")
