"""Property test: any combination of trace's options, valid or not, ends in
help/BPF text and exit 0, or one `cudaprobe: ...` line and exit 2; never a
traceback or an internal error, and nothing written.

Runs in-process (click's CliRunner) with the effective uid made non-root, so
that no combination gets as far as tracing.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudaprobe.cli import main

from ..conftest import libcudart_path

LIB = str(libcudart_path() or "/usr/local/cuda/lib64/libcudart.so")
SCRATCH = Path(os.environ.get("TMPDIR", "/tmp")) / f"cudaprobe-fuzz-cli-{os.getpid()}"

OPTIONS = [
    ["--lib", LIB], ["--lib", "/nonexistent/libcudart.so"], ["--lib", "/bin/true"],
    ["--lib", str(SCRATCH)], ["-e", "cudaMalloc"], ["-e", "memory,transfer"], ["-e", "bogus"],
    ["-e", ""], ["--api", "driver"], ["--api", "runtime"], ["--api", "gpu"],
    ["-f", "jsonl"], ["-f", "csv"], ["-f", "xml"], ["--format", "table"],
    ["-o", str(SCRATCH / "new.jsonl")], ["-o", str(SCRATCH / "exists.csv")], ["-o", "-"],
    ["-o", str(SCRATCH)], ["-o", "/sys/x.jsonl"], ["--force"], ["-d", "1"], ["-d", "-1"],
    ["-d", "nan"], ["-d", "inf"], ["--errors-only"], ["--dump-bpf"], ["--mode", "0644"],
    ["--mode", "9"], ["--max-size", "1M"], ["--max-size", "0"], ["--max-size", "x"],
    ["--strict"], ["--ringbuf-pages", "1"], ["--ringbuf-pages", "3"], ["-p", "1"],
    ["-p", "0"], ["-p", "-5"], ["-p", "x"], ["--comm", "python3"], ["--comm", ""], ["--wait"],
    ["--bogus"], ["-h"],
]
COMMANDS = [[], ["--"], ["--", "/bin/true"], ["--", "no-such-command"], ["--", "/etc"],
            ["--", "/bin/echo", "$(id)", ";", "'"]]


def scratch_state() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(SCRATCH.iterdir())}


@given(st.lists(st.sampled_from(OPTIONS), max_size=6), st.sampled_from(COMMANDS))
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_option_combination_is_handled(options, command):
    SCRATCH.mkdir(exist_ok=True)
    (SCRATCH / "exists.csv").write_text("keep\n")
    before = scratch_state()
    argv = ["trace", *[token for option in options for token in option], *command]
    with mock.patch("os.geteuid", return_value=1000):
        result = CliRunner().invoke(main, argv)
    assert scratch_state() == before, argv
    assert result.exit_code in (0, 2), (argv, result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, argv
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("cudaprobe: "), (argv, result.stderr)
    else:  # only help and --dump-bpf end well without tracing
        assert ["-h"] in options or ["--dump-bpf"] in options, argv
        assert result.stdout


def test_the_scratch_directory_goes_away():
    """Not a property: clean-up after the one above."""
    if SCRATCH.exists():
        for p in SCRATCH.iterdir():
            p.unlink()
        SCRATCH.rmdir()
    assert not SCRATCH.exists()
