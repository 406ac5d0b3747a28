"""serve --duty: the node daemon's probes on for a slice of each period. A
loop of calls through a libcudart of the test's own runs across several
slices; each call seen counts for the period over the slice, so every count
is a multiple of that weight and no more than the weight times the calls
made; breakpoints are in the loop's library only during a slice; live memory
is not exported; nothing is lost."""

from __future__ import annotations

import secrets
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import HANG_S, cudaprobe_cmd
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
            seen.add(first_byte(loop.pid, library, "cudaMalloc") == INT3)
            mine = [s for s in samples["cudaprobe_calls"]
                    if s.name == "cudaprobe_calls_total" and s.labels["process"] == name]
            if windows and windows[0].value >= 3 and mine and seen == {True, False}:
                break
            assert time.monotonic() < deadline, (seen, windows, err.text())
            time.sleep(0.05)
        calls = CALLS_PER_ITERATION * (loop.stop() + 1)
        samples = scrape(url)
        mine = [s.value for s in samples["cudaprobe_calls"]
                if s.name == "cudaprobe_calls_total" and s.labels["process"] == name]
        assert samples["cudaprobe_sampling_ratio"][0].value == 0.25
        assert all(v % 4 == 0 for v in mine), mine  # each call seen stands for 4
        assert 0 < sum(mine) <= 4 * calls
        assert not [s for s in samples.get("cudaprobe_memory_live_bytes", [])
                    if s.labels.get("process") == name]
        assert sum(s.value for s in samples["cudaprobe_lost_events"]) == 0
    finally:
        assert stop(serve) == 0, err.text()
