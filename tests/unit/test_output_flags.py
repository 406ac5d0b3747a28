"""One set of output flags on every reporting command: -f/--format and -o (the
format from -o's extension), --json kept as a hidden alias, -c CMD as bpftrace's."""

from __future__ import annotations

import io
import json
import subprocess

import pytest

from cudaprobe.commands.options import command_of
from cudaprobe.errors import UsageError
from cudaprobe.output.formats import REPORT_EXTENSIONS, REPORTERS, choose_format, format_of_output

from ..conftest import HANG_S, cudaprobe_cmd
from .test_reporters import calls, summary_for


@pytest.mark.parametrize("path, fmt", [
    ("t.json", "json"), ("T.JSON", "json"), ("t.jsonl", "jsonl"), ("t.ndjson", "jsonl"),
    ("t.csv", "csv"), ("t.chrome.json", "chrome"), ("t.perfetto.json", "chrome"),
    ("t.txt", "table"), ("t.out", "table"), ("-", "table"), (None, "table"),
])
def test_trace_format_from_the_extension(path, fmt):
    assert choose_format(None, path) == fmt


@pytest.mark.parametrize("path, fmt", [("r.json", "json"), ("r.txt", "table"),
                                       ("r.jsonl", "table"), (None, "table")])
def test_report_format_from_the_extension(path, fmt):
    assert format_of_output(None, path, REPORT_EXTENSIONS) == fmt
    assert format_of_output("json", path, REPORT_EXTENSIONS) == "json"
    with pytest.raises(UsageError, match="csv"):
        format_of_output("csv", path, REPORT_EXTENSIONS)


def test_json_is_one_document_json_load_reads():
    for batches in ([], [calls()], [calls()[:1], [], calls()[1:]]):
        buf = io.StringIO()
        r = REPORTERS["json"](buf)
        r.start()
        for b in batches:
            r.calls(b)
        r.finish(summary_for(calls()))
        doc = json.loads(buf.getvalue())
        assert [c["event"] for c in doc["calls"]] == [c.event for b in batches for c in b]
        assert doc["summary"]["calls"] == 2
        if doc["calls"]:  # the same objects as JSON Lines'
            line = io.StringIO()
            REPORTERS["jsonl"](line).calls(calls()[:1])
            assert doc["calls"][0] == json.loads(line.getvalue())


def test_c_cmd_is_split_as_the_shell_splits():
    assert command_of("./app --n 'a b' \"c\"", ()) == ("./app", "--n", "a b", "c")
    assert command_of(None, ("./app", "x")) == ("./app", "x")
    with pytest.raises(UsageError, match="both"):
        command_of("./app", ("./app",))
    with pytest.raises(UsageError, match="quotation"):
        command_of("./app 'x", ())
    with pytest.raises(UsageError, match="needs a command"):
        command_of("  ", ())


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cudaprobe_cmd(*args), capture_output=True, text=True, timeout=HANG_S)


@pytest.mark.parametrize("command", ["trace", "stats", "memory"])
def test_every_reporting_command_takes_the_same_flags(command):
    p = run(command, "--help")
    assert p.returncode == 0
    for flag in ("-f, --format", "-o, --output", "-c, --cmd"):
        assert flag in p.stdout
    assert "--json" not in p.stdout  # the old name works, unlisted
    p = run(command, "-c", "true", "--", "true")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "give one" in p.stderr


@pytest.mark.parametrize("command", ["stats", "memory"])
def test_json_and_a_table_format_disagree(command, tmp_path):
    p = run(command, "--json", "-f", "table", "-d", "1")
    assert p.returncode == 2 and "--json and -f table" in p.stderr
    assert "Traceback" not in p.stderr
