"""uprobe_events housekeeping, on a stand-in file (no root, no tracefs)."""

from __future__ import annotations

import os

from cudaprobe.probe import cleanup

EVENTS = """\
p:uprobes/p__usr_lib_libcudart_so_0x1234_bcc_4242 /usr/lib/libcudart.so:0x0000000000001234
r:uprobes/r__usr_lib_libcudart_so_0x1234_bcc_4242 /usr/lib/libcudart.so:0x0000000000001234
p:uprobes/p__bin_bash_0x10_bcc_77 /bin/bash:0x0000000000000010
p:probe_bash/readline /bin/bash:0x00000000000b8e70
p:uprobes/my_bcc_probe /bin/true:0x10
"""


def test_bcc_entries_are_found_with_their_pid():
    assert cleanup.bcc_events(EVENTS) == [
        ("uprobes/p__usr_lib_libcudart_so_0x1234_bcc_4242", 4242),
        ("uprobes/r__usr_lib_libcudart_so_0x1234_bcc_4242", 4242),
        ("uprobes/p__bin_bash_0x10_bcc_77", 77),
    ]


def test_only_entries_of_dead_pids_are_removed_by_appending(tmp_path, monkeypatch):
    events = tmp_path / "uprobe_events"
    events.write_text(EVENTS)
    monkeypatch.setattr(cleanup, "TRACEFS_DIRS", (str(tmp_path),))
    monkeypatch.setattr(cleanup, "pid_alive", lambda pid: pid == 77)
    note = cleanup.remove_stale_uprobe_events()
    assert note == "removed 2 uprobe_events entries left by crashed bcc tools"
    # appended, never truncated: the kernel reads each "-:" line as a removal
    assert events.read_text() == EVENTS + (
        "-:uprobes/p__usr_lib_libcudart_so_0x1234_bcc_4242\n"
        "-:uprobes/r__usr_lib_libcudart_so_0x1234_bcc_4242\n")


def test_nothing_to_say_without_stale_entries(tmp_path, monkeypatch):
    (tmp_path / "uprobe_events").write_text(EVENTS)
    monkeypatch.setattr(cleanup, "TRACEFS_DIRS", (str(tmp_path),))
    monkeypatch.setattr(cleanup, "pid_alive", lambda pid: True)
    assert cleanup.remove_stale_uprobe_events() is None
    monkeypatch.setattr(cleanup, "TRACEFS_DIRS", (str(tmp_path / "missing"),))
    assert cleanup.remove_stale_uprobe_events() is None


def test_entries_that_cannot_be_removed_are_reported(tmp_path, monkeypatch):
    events = tmp_path / "uprobe_events"
    events.write_text(EVENTS)
    monkeypatch.setattr(cleanup, "TRACEFS_DIRS", (str(tmp_path),))
    monkeypatch.setattr(cleanup, "pid_alive", lambda pid: False)
    real_write = os.write

    def write(fd, data):  # the kernel refuses to remove an entry still enabled
        if b"bash" in data:
            raise OSError(16, "Device or resource busy")
        return real_write(fd, data)

    monkeypatch.setattr(cleanup.os, "write", write)
    note = cleanup.remove_stale_uprobe_events()
    assert note == ("removed 2 uprobe_events entries left by crashed bcc tools; 1 could not be "
                    "removed (still in use?): uprobes/p__bin_bash_0x10_bcc_77")


def test_a_pid_is_alive_until_it_is_gone():
    assert cleanup.pid_alive(os.getpid())
    assert not cleanup.pid_alive(int(open("/proc/sys/kernel/pid_max").read()))
