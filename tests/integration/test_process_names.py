"""A process's name as the kernel keeps it (comm: 15 bytes, cut wherever the
15th byte falls) is UTF-8 text in every output: a character the kernel's
cut left incomplete is dropped, and a byte that is not UTF-8 is written
`\\xNN`, never a lossy U+FFFD, never Latin-1 (`ab日本語` as `abæ\\x97¥...`).
The names are given with prctl(PR_SET_NAME) by workloads/hostile_name.c."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import time
import urllib.request

import pytest

from ..conftest import build_workload, cudaprobe_cmd
from .running import WAIT_S, started
from .test_serve_prometheus import free_port

# what the process asks for -> what each output must say
CUT_IN_A_CHARACTER = ("ab日本語日本語".encode(), "ab日本語日")  # 15 bytes end in 本's first
NOT_UTF8 = (b"a\xffb\xe6\x97", "a\\xffb\\xe6\\x97")  # too short for a kernel cut: kept
NAMES = [pytest.param(*CUT_IN_A_CHARACTER, id="cut"), pytest.param(*NOT_UTF8, id="bytes")]


@pytest.mark.parametrize(("name", "shown"), NAMES)
def test_trace_rows_name_the_process_in_utf8(libcudart, tmp_path, name, shown):
    exe = str(build_workload("hostile_name.c"))
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"calls.{fmt}"
        proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out),
                                            "-e", "cudaMalloc", "--", exe, name.hex()),
                              capture_output=True, timeout=WAIT_S)
        assert proc.returncode == 0, proc.stderr
        text = out.read_bytes().decode()  # strict: valid UTF-8
        rows = ([json.loads(line) for line in text.splitlines() if '"summary"' not in line]
                if fmt == "jsonl" else list(csv.DictReader(io.StringIO(text))))
        assert [r["process"] for r in rows] == [shown, shown], text


@pytest.mark.parametrize(("name", "shown"), NAMES)
def test_prometheus_labels_name_the_process_in_utf8(libcudart, name, shown):
    """serve's process label: scraped after the calls, while the process that
    made them waits on the test."""
    target = f"127.0.0.1:{free_port()}"
    exe = str(build_workload("hostile_name.c"))
    serve = started(subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--lib", str(libcudart), "--",
                      exe, name.hex(), "+"),
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    label = 'process="' + shown.replace("\\", "\\\\") + '"'  # Prometheus escapes `\`
    try:
        deadline, metrics = time.monotonic() + WAIT_S, ""
        # both calls counted: the rows come a poll at a time, a scrape may fall between
        while 'function="cudaMalloc",' + label + "} 2.0" not in metrics:
            assert time.monotonic() < deadline and serve.poll() is None, metrics
            try:
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=WAIT_S) as r:
                    metrics = r.read().decode()  # strict: valid UTF-8
            except OSError:
                pass  # not serving yet
            time.sleep(0.05)  # between scrapes, not a guess: the loop waits for the label
        assert 'function="cudaMalloc",' + label + "} 2.0" in metrics, metrics
        assert "\ufffd" not in metrics
    finally:
        serve.stdin.close()
        serve.wait(timeout=WAIT_S)
