"""Bad input that any user is told of, before the root check, and the root
check itself: one line on stderr, exit 2, no traceback, nothing written
(tests/badinput.py runs the real `cudaprobe`). What takes root to reach is in
tests/integration/test_bad_input.py.
"""

from __future__ import annotations

import pytest

from ..badinput import LIB, assert_one_line, run

# arguments of `cudaprobe trace` -> fragments of the one line it must print
CASES = {
    "unknown event": (["--lib", LIB, "-e", "cudaMallok"],
                      ["unknown event or category 'cudaMallok'", "did you mean cudaMalloc"]),
    "bad format": (["-f", "xml"], ["Invalid value for '-f' / '--format': 'xml'",
                                   "(see `cudaprobe trace --help`)"]),
    "bad duration": (["-d", "0"], ["Invalid value for '-d' / '--duration'"]),
    "bad api": (["--api", "gpu"], ["Invalid value for '--api'"]),
    "duration nan": (["-d", "nan"], ["'nan' is not a number of seconds above 0"]),
    "duration inf": (["-d", "inf"], ["'inf' is not a number of seconds above 0"]),
    "comm empty": (["--comm", ""], ["--comm needs a process name"]),
    "ringbuf too big": (["--ringbuf-pages", "1048576"], ["more than 524288 pages (2 GiB"]),
    "otlp unclosed IPv6": (["--otlp", "http://[::1"], ["is not an OTLP/HTTP endpoint"]),
    "otlp not a URL": (["--otlp", "notaurl"], ["'notaurl' is not an OTLP/HTTP endpoint"]),
    "unknown option": (["--bogus"], ["No such option '--bogus'"]),
    "force without output": (["--force", "--", "/bin/true"], ["--force goes with -o FILE"]),
    "mode without output": (["--mode", "0644"], ["--mode goes with -o FILE"]),
    "max-size to stdout": (["--max-size", "1M", "-o", "-"], ["--max-size goes with -o FILE"]),
    "dump-bpf with output": (["--dump-bpf", "-o", "new.jsonl"],
                             ["--dump-bpf prints the BPF program and exits"]),
    "pid with command": (["--pid", "1", "--", "/bin/true"], ["leave out --pid"]),
    "wait without pid": (["--wait"], ["--wait goes with --pid"]),
    "bad mode": (["--mode", "888", "-o", "new.jsonl"], ["not an octal file mode"]),
    "bad max-size": (["--max-size", "lots", "-o", "new.jsonl"], ["not a size"]),
    "events all left out": (["-e", "!all"], ["-e '!all' selects no function"]),
    "events taken back": (["-e", "cudaMalloc,!cudaMalloc"],
                          ["-e 'cudaMalloc,!cudaMalloc' selects no function"]),
    "events empty": (["-e", ""], ["-e '' names no function"]),
    "events only commas": (["-e", ","], ["-e ',' names no function"]),
    "nothing after --": (["--"], ["-- needs a command after it"]),
    "otlp-sample nan": (["--otlp", "http://x:4318", "--otlp-sample", "nan"],
                        ["'nan' is not a finite number"]),
    "otlp-interval inf": (["--otlp", "http://x:4318", "--otlp-interval", "inf"],
                          ["'inf' is not a finite number"]),
    "otlp-timeout 0": (["--otlp", "http://x:4318", "--otlp-timeout", "0"],
                       ["0.0 is not in the range x>=0.1"]),
    "lib empty": (["--lib", "", "-d", "1"], ["CUDA library '': empty"]),
    "nothing after -- with options": (["-o", "new.jsonl", "--"],
                                      ["-- needs a command after it"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trace_bad_input(scratch, case):
    args, fragments = CASES[case]
    assert_one_line(run(scratch, "trace", *args), *fragments)


def test_unknown_command_and_top_level_option(scratch):
    assert_one_line(run(scratch, "tarce"), "No such command 'tarce'")
    assert_one_line(run(scratch, "--bogus"), "No such option '--bogus'")


def test_verbose_shows_the_traceback(scratch):
    proc = run(scratch, "-v", "trace", "-e", "cudaMallok")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "UnknownEvent" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("cudaprobe: unknown event or category")


def test_not_root(scratch):
    line = assert_one_line(run(scratch, "trace", "--lib", LIB, "-o", "new.jsonl", "--",
                               "/bin/true", not_root=True))
    assert line == "cudaprobe: tracing needs root (CAP_BPF and CAP_PERFMON) (run it with sudo)"


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_stats_threshold_must_be_finite(scratch, value):
    assert_one_line(run(scratch, "stats", "--threshold", value, "--dump-bpf"),
                    f"'{value}' is not a finite number")


@pytest.mark.parametrize("command", ["stats", "memory"])
@pytest.mark.parametrize("output", ["x.csv", "x.jsonl", "x.chrome.json"])
def test_a_report_to_a_format_only_trace_writes_is_one_line(scratch, command, output):
    assert_one_line(run(scratch, command, "-o", output, "--", "/bin/true"),
                    f"-o '{output}' names the", "only `trace` writes")


@pytest.mark.parametrize("command", ["stats", "memory"])
@pytest.mark.parametrize("value", ["1e-9", "0.05"])
def test_interval_has_a_minimum(scratch, command, value):
    """A table every nanosecond was accepted: 51 tables in 2 s."""
    assert_one_line(run(scratch, command, "--interval", value, "--", "/bin/true"),
                    f"'{value}' is less than 0.1 s")


def test_a_bad_baseline_is_said_before_anything_runs(scratch):
    (scratch / "base.json").write_text('{"cudaprobe": "stats", "schema": 1, "functions": null}')
    proc = run(scratch, "stats", "--compare", "base.json", "--", "/bin/true")
    assert_one_line(proc, "baseline 'base.json'")
