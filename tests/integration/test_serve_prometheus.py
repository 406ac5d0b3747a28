"""cudaprobe serve --prometheus scraped by a real Prometheus server (Debian's
`prometheus`), asked with PromQL over its HTTP API.

Each test's serve probes the toolkit's real libcudart (every call fails with
35 here: errors are counted too) and the memstub libraries (allocations
succeed: live bytes show), following one process name (--comm) that only
that test's workload runs under: what other tests and benchmarks do with the
same libraries meanwhile is not even sent by the kernel.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .conftest import expected_calls
from .fleet import build_fleet_stub, fleet_node
from .memstub import build_memstub, stub_env
from .running import Lines, started

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

PROMETHEUS = Path("/usr/bin/prometheus")
WAIT_S = HANG_S
LOOPS, THREADS = 4, 2  # runtime_calls: 10 calls a loop, each thread


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def renamed(exe: Path, tmp_path: Path, name: str) -> Path:
    """A copy of `exe` that runs under `name` (its comm, and so its process label)."""
    copy = tmp_path / name
    shutil.copy2(exe, copy)
    return copy


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the test process dies, so that
    a pytest killed mid-test (no finally runs) leaves no server behind."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


PR_SET_PDEATHSIG = 1


class Prometheus:
    """/usr/bin/prometheus scraping one target each second, in tmp_path."""

    def __init__(self, tmp_path: Path, target: str, labels: dict[str, str] | None = None) -> None:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: cudaprobe\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
            f"        labels: {json.dumps(labels or {})}\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = tmp_path / "prometheus.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={config}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address={self.url[len('http://'):]}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=die_with_parent)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready: {self.log.read_text()}")

    def query(self, promql: str) -> dict[tuple, float]:
        """An instant query: each series' labels (sorted, __name__ left out) -> value."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=HANG_S) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return {tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__")):
                float(s["value"][1]) for s in body["data"]["result"]}

    def value(self, promql: str) -> float | None:
        result = self.query(promql)
        assert len(result) <= 1, result
        return next(iter(result.values()), None)

    def wait_for(self, promql: str, expected: float | None) -> None:
        """Until a scrape has brought what `expected` says (None: no series)."""
        deadline = time.monotonic() + WAIT_S
        while (got := self.value(promql)) != expected:
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql} = {got}, not {expected}")
            time.sleep(0.25)


@pytest.fixture
def served(tmp_path, libcudart):
    """serve --prometheus (real libcudart and the memstub libraries), and Prometheus."""
    if not PROMETHEUS.exists():
        pytest.skip("no /usr/bin/prometheus: run scripts/setup")
    target = f"127.0.0.1:{free_port()}"
    name = f"prom{secrets.token_hex(5)}"  # 14 characters: comm keeps 15
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--comm", name, "--lib", str(libcudart),
                      "--lib", str(build_memstub()), "-d", "120"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    prometheus = None
    try:
        err.wait_for(lambda s: f"serving Prometheus metrics on http://{target}/metrics" in s,
                     "serving", timeout=WAIT_S)
        prometheus = Prometheus(tmp_path, target)
        prometheus.wait_for('up{job="cudaprobe"}', 1)  # its first scrape: seconds after ready
        yield prometheus, serve, err, name
    finally:
        if prometheus is not None:
            stop(prometheus.proc)
        stop(serve)


def test_prometheus_scrapes_the_exact_counts(tmp_path, served):
    prometheus, serve, err, name = served
    exe = renamed(build_workload("runtime_calls.c"), tmp_path, name)
    # held at its open of libcudart until its own probes are in (--comm: links
    # per process), and so counted from its first call
    run = started(subprocess.Popen([str(exe), str(LOOPS), str(THREADS)],
                                   stdout=subprocess.PIPE, text=True))
    stdout, _ = run.communicate(timeout=WAIT_S)
    err.wait_for(lambda s: f"pid {run.pid} ({exe.name}) started under the name: traced from "
                 "its first call" in s, "its probes")
    assert run.returncode == 0
    truth = expected_calls(stdout)
    assert len(truth) == LOOPS * THREADS * 10
    process = f'process="{exe.name}"'
    prometheus.wait_for(f"sum(cudaprobe_calls_total{{{process}}})", len(truth))

    assert prometheus.value("count(cudaprobe_build_info)") == 1
    assert prometheus.value(
        f'sum(cudaprobe_calls_total{{function="cudaMalloc",{process}}})') == LOOPS * THREADS
    by_function = prometheus.query(f"sum by (function) (cudaprobe_calls_total{{{process}}})")
    assert by_function == {(("function", e),): n for e, n in
                           collections.Counter(t["event"] for t in truth).items()}
    errors = prometheus.query(
        f"sum by (function, error) (cudaprobe_call_errors_total{{{process}}})")
    assert errors == {(("error", "cudaErrorInsufficientDriver"), ("function", e)): n for e, n in
                      collections.Counter(t["event"] for t in truth if t["ret"]).items()}
    assert prometheus.value(f'sum(cudaprobe_calls_total{{api="runtime",{process}}})') == len(truth)
    # the histogram has no process label: --comm keeps other processes' calls out of it
    for series in ('cudaprobe_call_duration_seconds_count{function="cudaMalloc"}',
                   'cudaprobe_call_duration_seconds_bucket{function="cudaMalloc",le="+Inf"}'):
        assert prometheus.value(series) == LOOPS * THREADS
    median = prometheus.value("histogram_quantile(0.5, sum by (le) ("
                              'cudaprobe_call_duration_seconds_bucket{function="cudaMalloc"}))')
    assert 0 < median <= 10  # seconds: within the buckets' bounds
    assert prometheus.value("sum(cudaprobe_lost_events_total)") == 0

    assert stop(serve) == 0, err.text()
    err._thread.join(timeout=WAIT_S)
    assert ", 0 lost" in err.text()


NONE = {"device": 0, "managed": 0, "async-pool": 0, "host-pinned": 0, "vmm": 0,
        "host-registered": 0}


@pytest.mark.parametrize("workload, first, live", [
    # allocates, frees, resets the device, allocates 64 KiB it never frees, then sleeps;
    # its device bytes counted once, though both APIs are probed
    ("memory_mix.c", "device", {**NONE, "device": 64 << 10}),
    # leaves three 2 MiB VMM chunks (one mapped, one released but mapped, one never
    # mapped), a 128 KiB pool allocation and 256 KiB registered, then sleeps
    ("memory_vmm.c", "vmm", {**NONE, "vmm": 6 << 20, "async-pool": 128 << 10,
                             "host-registered": 256 << 10}),
])
def test_live_bytes_while_a_process_holds_memory_and_gone_when_it_exits(tmp_path, served,
                                                                        workload, first, live):
    prometheus, _, err, name = served
    stub = build_memstub()
    exe = renamed(build_workload(workload, extra=[f"-L{stub}", "-l:libcuda.so.1"]),
                  tmp_path, name)
    app = started(subprocess.Popen([str(exe), "4000"], env=stub_env(), stdout=subprocess.PIPE,
                                   text=True))
    err.wait_for(lambda s: f"pid {app.pid} ({exe.name}) started under the name: traced from "
                 "its first call" in s, "its probes")
    try:
        series = f'cudaprobe_memory_live_bytes{{process="{exe.name}",kind="{first}"}}'
        prometheus.wait_for(series, live[first])
        # the program makes its kinds one after another: a scrape may fall between them
        for kind, value in live.items():
            if value:
                prometheus.wait_for(
                    f'cudaprobe_memory_live_bytes{{process="{exe.name}",kind="{kind}"}}', value)
        kinds = prometheus.query(f'cudaprobe_memory_live_bytes{{process="{exe.name}"}}')
        assert {dict(k)["kind"]: v for k, v in kinds.items()} == live
        assert app.wait(timeout=WAIT_S) == 0
        prometheus.wait_for(series, None)  # its process has exited: the series goes
    finally:
        app.kill()
        app.wait()


FLOOD = 1000  # junk-named processes, one call each
NOBODY = 65534
ROUND = 34  # fleet_node's runtime calls in one round


@pytest.fixture
def shared_dir():
    """A directory uid nobody can read (tmp_path's parents are root's alone)."""
    where = Path(tempfile.mkdtemp(prefix="cudaprobe-flood-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where)


def test_a_flood_of_junk_names_leaves_a_busy_job_its_own_label(tmp_path, shared_dir):
    """A tenant (uid nobody) starts FLOOD short processes, each under a junk
    name of its own, before a real job (root's): the job still gets its own
    `process` label (from the scrape after its first calls), and no series
    Prometheus holds ever went down while labels moved."""
    if not PROMETHEUS.exists():
        pytest.skip("no /usr/bin/prometheus: run scripts/setup")
    # copies of the stand-ins only this test's processes map: serve probes every
    # process that maps them, and no other test's calls reach it
    stubs = {name: Path(shutil.copytree(built, shared_dir / name))
             for name, built in (("fleetstub", build_fleet_stub()), ("memstub", build_memstub()))}
    flooder = Path(shutil.copy2(build_workload("junk_names.c"), shared_dir / "junk_names"))
    env = {**os.environ, "LD_LIBRARY_PATH": f"{stubs['fleetstub']}:{stubs['memstub']}"}
    target = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--api", "runtime",
                      "--lib", str(stubs["fleetstub"] / "libcudart.so.13"), "-d", "600"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    prometheus = node = None
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=WAIT_S)
        prometheus = Prometheus(tmp_path, target)
        prometheus.wait_for('up{job="cudaprobe"}', 1)
        # every call of every series that existed, labels moved or not
        total = "sum(max_over_time(cudaprobe_calls_total[1h]))"
        flood = subprocess.run([str(flooder), str(FLOOD)], env=env, capture_output=True,
                               text=True, timeout=WAIT_S, cwd="/", user=NOBODY, group=NOBODY,
                               extra_groups=[])
        assert flood.stdout == f"flooded {FLOOD}\n", flood.stderr
        prometheus.wait_for(total, FLOOD)
        node = subprocess.Popen([str(fleet_node())], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        out = Lines(node.stdout)
        for n in (1, 2):
            node.stdin.write("round\n")
            node.stdin.flush()
            out.wait_for(lambda s, n=n: s == f"round {n}", f"round {n}", timeout=WAIT_S)
            # scraped (and so ranked again) with this round's calls counted
            prometheus.wait_for(total, FLOOD + n * ROUND)
        # round 1 went to `other` (the labels were the flood's); round 2 to its own
        assert prometheus.value('sum(cudaprobe_calls_total{process="fleet_node"})') == ROUND
        assert prometheus.value("max(resets(cudaprobe_calls_total[1h]))") == 0
        node.stdin.close()
        assert node.wait(timeout=WAIT_S) == 0
        assert stop(serve) == 0, err.text()
        err._thread.join(timeout=WAIT_S)
        assert ", 0 lost" in err.text()
    finally:
        if node is not None:
            node.kill()
            node.wait()
        if prometheus is not None:
            stop(prometheus.proc)
        stop(serve)


def test_a_program_started_right_after_the_first_answer_is_counted(shared_dir):
    """serve binds its address before its probes are in, and answers 503 until
    they are: a readiness check or a scrape never takes it for a live tracer
    too early. The program is started the moment /metrics first answers 200,
    and every call of it is in the next scrape."""
    # copies only this test's process maps: serve probes every process mapping them
    stub = Path(shutil.copytree(build_fleet_stub(), shared_dir / "fleetstub"))
    memstub = Path(shutil.copytree(build_memstub(), shared_dir / "memstub"))
    env = {**os.environ, "LD_LIBRARY_PATH": f"{stub}:{memstub}"}
    target = f"127.0.0.1:{free_port()}"
    url = f"http://{target}/metrics"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--api", "runtime",
                      "--lib", str(stub / "libcudart.so.13"), "-d", "600"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    node = None
    try:
        answers = collections.Counter()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=WAIT_S) as r:
                    answers[r.status] += 1
                    break
            except urllib.error.HTTPError as e:
                answers[e.code] += 1
            except OSError:  # not bound yet
                answers["refused"] += 1
            assert serve.poll() is None, err.text()
            time.sleep(0.01)
        assert answers[200] == 1, (answers, err.text())
        assert set(answers) <= {200, 503, "refused"}, answers
        node = subprocess.Popen([str(fleet_node())], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        node.stdin.write("round\n")
        node.stdin.close()
        assert node.stdout.readline().strip() == "round 1"
        assert node.wait(timeout=WAIT_S) == 0
        # the reader drains the ring asynchronously: scraped until every call of
        # the round is in (the old serve, live a second after its first 200,
        # never saw them: the hang guard ends that wait)
        while True:
            with urllib.request.urlopen(url, timeout=WAIT_S) as r:
                text = r.read().decode()
            counted = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("cudaprobe_calls_total{"))
            if counted >= ROUND or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert counted == ROUND, text
    finally:
        if node is not None:
            node.kill()
        stop(serve)
