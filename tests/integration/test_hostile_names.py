"""Bytes a traced process controls reach the terminal escaped: a process
named with an escape sequence and a newline (its executable's file name)
gives one table row, and the lines that name it say it escaped, as strace
writes such bytes (`\\x1b`, `\\n`). On a real terminal (a pty), no view lets
through a byte the terminal would act on but rich's own colours."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import struct
import subprocess
import termios
import threading

from ..conftest import as_not_root, build_workload, cudaprobe_cmd
from .memstub import build_memstub, stub_env
from .running import WAIT_S, started

NAME = '\x1b[31m,"b\nc\\d'  # 12 characters: the whole comm


def test_a_process_name_with_escapes_is_one_escaped_row(tmp_path, libcudart):
    exe = tmp_path / NAME
    shutil.copy(build_workload("runtime_calls.c"), exe)
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-e", "cudaMalloc",
                                        "--", str(exe), "2"),
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert "\x1b" not in err and "c\\d" not in err.replace("c\\\\d", "")
    escaped = '\\x1b[31m,"b\\nc\\\\d'
    rows = [line for line in err.splitlines() if " cudaMalloc " in line and "size=" in line]
    # PROCESS is 15 characters: the escaped name is cut there (in the middle), on its line
    shown = escaped[:7] + "…" + escaped[-7:]
    assert len(rows) == 2 and all(f" {shown} " in row for row in rows), err
    # the name in cudaprobe's own lines (the command's path), escaped too
    assert f"{escaped} exited (status 0)" in err


# --- on a terminal, as a user sees it: a pty of 100 columns ---------------------

# the name a process gives itself (prctl): ESC [2J clears the screen, ESC ] 0;...BEL
# sets the window title
COMM = b"\x1b[2J\x1b]0;pwned\x07"
COMM_SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07"
# its file's name: a C1 CSI (U+009B), a bidi override and a newline
FILE_NAME = "\u009b2J\u202ex\nrun"
SGR = re.compile(rb"\x1b\[[0-9;]*m")  # rich's colours: the only sequences allowed
UNSAFE = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
                    "\u2028\u2029\ud800-\udfff]")


class Pty:
    """A command run with a pty of 100 columns as its stdin, stdout and stderr,
    its output collected on a thread (read until the last writer has gone)."""

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 100, 0, 0))
        env = {k: v for k, v in (env or os.environ).items()
               if k not in ("NO_COLOR", "COLUMNS", "LINES")}
        self.proc = started(subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                             env={**env, "TERM": "xterm-256color"},
                                             start_new_session=True))
        os.close(slave)
        self.data = bytearray()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._thread.start()

    def _read(self, master: int) -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: no writer left
                chunk = b""
            with self._cond:
                if not chunk:
                    os.close(master)
                    self.data += b"\0EOF"
                    self._cond.notify_all()
                    return
                self.data += chunk
                self._cond.notify_all()

    def wait_for(self, text: bytes) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: text in self.data or b"\0EOF" in self.data,
                                       timeout=WAIT_S), bytes(self.data)
            assert text in self.data, bytes(self.data)

    def finish(self) -> tuple[int, str]:
        """The exit status, and what the terminal got (UTF-8, undecodable bytes kept)."""
        rc = self.proc.wait(timeout=WAIT_S)
        self._thread.join(timeout=WAIT_S)
        return rc, bytes(self.data).removesuffix(b"\0EOF").decode("utf-8", "surrogateescape")


def assert_terminal_safe(shown: str) -> None:
    """Nothing reaches the terminal that acts on it but rich's SGR colours: no
    other ESC sequence (no OSC, no ESC[2J), no BEL, no C1, no bidi control."""
    rest = SGR.sub(b"", shown.encode("utf-8", "surrogateescape")).decode("utf-8",
                                                                         "surrogateescape")
    assert "\x1b" not in rest, repr(rest)
    assert not UNSAFE.search(rest), repr(UNSAFE.search(rest))


def hostile_exe(tmp_path) -> str:
    exe = tmp_path / FILE_NAME
    shutil.copy(build_workload("hostile_name.c"), exe)
    return str(exe)


def test_trace_and_memory_on_a_terminal_show_the_names_escaped(tmp_path):
    """The trace table's rows and summary, memory's table and leak report
    (`pid N (NAME) exited`), and the lines on stderr that name the command."""
    env = stub_env()  # allocations succeed: one is left, and the leak report names the process
    stub = build_memstub()
    for args in (["trace", "--lib", str(stub)], ["memory", "--lib", str(stub)]):
        run = Pty(cudaprobe_cmd(*args, "--", hostile_exe(tmp_path), COMM.hex()), env=env)
        rc, shown = run.finish()
        assert rc == 0, shown
        assert_terminal_safe(shown)
        # the name, escaped, where each view shows it
        if args[0] == "trace":
            assert "\\x1b[2J… " in shown, shown  # PROCESS at 100 columns: 8 cells, cut whole
        else:
            assert f"({COMM_SHOWN}) exited: peak 3.0 MiB" in shown, shown
            # the final table: the name cut to 15 cells in the middle, between escapes
            assert " \\x1b[2J…ned\\x07 " in shown.split("cudaprobe memory")[1], shown


def test_stats_attached_to_a_process_of_nobody_escapes_its_name(tmp_path, libcudart):
    """stats --pid of a process `nobody` runs and names: the notices on stderr
    (`attached to pid N (NAME)`) and the summary's line on what was not traced."""
    exe = build_workload("hostile_name.c")
    app = started(subprocess.Popen(as_not_root([str(exe), COMM.hex(), "-"]),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    assert app.stdout.readline() == b'{"ready": 1}\n'  # named: attach now
    run = Pty(cudaprobe_cmd("stats", "--pid", str(app.pid), "--lib", str(libcudart)))
    run.wait_for(f"attached to pid {app.pid}".encode())
    app.stdin.close()  # go: its calls, then its exit ends the stats
    assert app.wait(timeout=WAIT_S) == 0
    rc, shown = run.finish()
    assert rc == 0, shown
    assert_terminal_safe(shown)
    assert f"pid {app.pid} ({COMM_SHOWN}) ran" in shown, shown
    assert "cudaMalloc" in shown.split("cudaprobe stats")[1]  # the table, with its calls


def test_rows_of_data_formats_on_a_terminal_are_escaped_and_exact_in_a_file(tmp_path, libcudart):
    """-f jsonl and -f csv to a terminal: the name escaped (JSON's `\\u` escapes,
    still the same JSON); to a file, its exact bytes."""
    comm = "\u202e\x1b]0;t\x07\u009b".encode()  # a bidi override, an OSC, a C1 CSI
    exe = build_workload("hostile_name.c")
    for fmt in ("jsonl", "csv"):
        run = Pty(cudaprobe_cmd("trace", "--lib", str(libcudart), "-f", fmt, "-o", "-", "--",
                                str(exe), comm.hex()))
        rc, shown = run.finish()
        assert rc == 0, shown
        assert_terminal_safe(shown)
        rows = [line for line in shown.splitlines()
                if '"event":"cudaMalloc"' in line or ",cudaMalloc," in line]
        assert len(rows) == 2, shown
        if fmt == "jsonl":
            assert all(json.loads(row)["process"] == comm.decode() for row in rows)
        else:
            assert all(",\\u202e\\x1b]0;t\\x07\\x9b," in row for row in rows), rows
    out = tmp_path / "calls.csv"
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out), "--",
                                        str(exe), comm.hex()), capture_output=True, timeout=WAIT_S)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().count(b"," + comm + b",") == 3  # its three calls' rows
