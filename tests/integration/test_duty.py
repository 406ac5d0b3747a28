"""serve --duty: the node daemon's probes on for a slice of each period. A
loop of calls through a libcudart of the test's own runs across several
slices; each call seen counts for the period over the slice, so every count
is a multiple of that weight and no more than the weight times the calls
made; breakpoints are in the loop's library only during a slice, but for the
allocations and frees, traced all the time and counted exactly (each
cudaMalloc and cudaFree the loop made, and their errors); nothing is lost."""

from __future__ import annotations

import secrets
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import HANG_S, cudaprobe_cmd
from .fleet import fleet_env, fleet_libs, fleet_node
from .running import Lines, Loop, build_loop
from .test_per_process import INT3, first_byte, private_copy
from .test_serve_prometheus import free_port, renamed, stop

pytestmark = pytest.mark.slow

CALLS_PER_ITERATION = 5  # cuda_loop.c


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=HANG_S) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_a_slice_a_period_its_calls_weighed_and_no_breakpoint_between(tmp_path, libcudart):
    library, env = private_copy(tmp_path, libcudart)
    name = f"duty{secrets.token_hex(5)}"
    exe = renamed(build_loop("shared"), tmp_path, name)
    target = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--lib", library, "--duty", "25%",
                      "--duty-period", "2", "-d", "120"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    url = f"http://{target}/metrics"
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=HANG_S)
        loop = Loop([exe, "2"], env=env)
        seen = set()
        deadline = time.monotonic() + HANG_S
        while True:  # until slices have come and gone while it runs, and one counted it
            samples = scrape(url)
            windows = samples.get("cudaprobe_sampled_windows", [])
            seen.add(first_byte(loop.pid, library, "cudaLaunchKernel") == INT3)
            assert first_byte(loop.pid, library, "cudaMalloc") == INT3  # on all the time
            mine = [s for s in samples["cudaprobe_calls"]
                    if s.name == "cudaprobe_calls_total" and s.labels["process"] == name]
            spread = {s.labels["quantity"]: s.value
                      for s in samples.get("cudaprobe_sampling_relative_error", [])}
            if (windows and windows[0].value >= 3 and mine and seen == {True, False}
                    and "calls" in spread):  # (two slices closed, one with calls)
                break
            assert time.monotonic() < deadline, (seen, windows, err.text())
            time.sleep(0.05)
        iterations = loop.stop() + 1
        calls = CALLS_PER_ITERATION * iterations

        def mine(family: str, sample: str) -> dict[str, float]:
            return {s.labels["function"]: s.value for s in samples[family]
                    if s.name == sample and s.labels["process"] == name}
        deadline = time.monotonic() + HANG_S
        while True:  # until the loop's last calls are counted
            samples = scrape(url)
            counts = mine("cudaprobe_calls", "cudaprobe_calls_total")
            if counts.get("cudaFree") == iterations:
                break
            assert time.monotonic() < deadline, (counts, iterations, err.text())
            time.sleep(0.05)
        assert samples["cudaprobe_sampling_ratio"][0].value == 0.25
        # 0: the loop's slices counted alike (each call in the slice of its time);
        # 1: every call in one slice
        assert 0 <= spread["calls"] <= 1 + 1e-9, spread
        exact = {f: counts.pop(f) for f in ("cudaMalloc", "cudaFree")}
        assert exact == {"cudaMalloc": iterations, "cudaFree": iterations}
        # no driver here: every allocation failed, each error counted once too
        errors = mine("cudaprobe_call_errors", "cudaprobe_call_errors_total")
        assert errors["cudaMalloc"] == iterations
        assert counts and all(v % 4 == 0 for v in counts.values()), counts  # each seen: 4
        assert 0 < sum(counts.values()) <= 4 * (calls - 2 * iterations)
        assert sum(s.value for s in samples["cudaprobe_lost_events"]) == 0
    finally:
        assert stop(serve) == 0, err.text()


def test_with_both_apis_live_memory_and_out_of_memory_errors_stay_exact(tmp_path):
    """Sampled 5% of the time, fleet_node's rounds through the stand-in runtime
    and driver (each cudaMalloc serves itself with cuMemAlloc_v2): every
    allocation, free and refused allocation at both APIs counted once, and
    live memory what the rounds hold, allocated at the runtime and counted once."""
    target = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, *fleet_libs(), "--duty", "5%",
                      "--duty-period", "2", "-d", "120"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(serve.stderr)
    url = f"http://{target}/metrics"
    node = None
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=HANG_S)
        node = subprocess.Popen([str(fleet_node())], env=fleet_env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = Lines(node.stdout)
        for n in (1, 2, 3):
            node.stdin.write("round\n")
            node.stdin.flush()
            out.wait_for(lambda s, n=n: s == f"round {n}", f"round {n}", timeout=HANG_S)
        deadline = time.monotonic() + HANG_S
        while True:  # until the third round's frees are counted, and its memory applied
            samples = scrape(url)
            calls = {s.labels["function"]: s.value for s in samples["cudaprobe_calls"]
                     if s.name == "cudaprobe_calls_total"}
            live = {s.labels["kind"]: s.value
                    for s in samples.get("cudaprobe_memory_live_bytes", [])
                    if s.labels.get("process") == "fleet_node"}
            if (calls.get("cudaFree") == 3 and calls.get("cuMemFree_v2") == 3
                    and live.get("device") == 3 * (2 << 20)):
                break
            assert time.monotonic() < deadline, (calls, live, err.text())
            time.sleep(0.05)
        errors = {(s.labels["function"], s.labels["error"]): s.value
                  for s in samples["cudaprobe_call_errors"]
                  if s.name == "cudaprobe_call_errors_total"}
        assert errors[("cudaMalloc", "cudaErrorMemoryAllocation")] == 3
        assert errors[("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY")] == 3
        assert calls["cudaMalloc"] == calls["cuMemAlloc_v2"] == 3 * 4
        assert calls["cudaMallocHost"] == 3
        assert live["host-pinned"] == 3 * (64 << 10)
    finally:
        if node is not None:
            node.stdin.close()
            assert node.wait(timeout=HANG_S) == 0
        assert stop(serve) == 0, err.text()
