"""Output streams when writing fails (output/files.py): whole lines kept, the
rest dropped and counted, the failure remembered rather than raised, and the
trailer tried once more. Real failures, no root: a file-size limit (EFBIG,
with a partial write first), /dev/full (ENOSPC), a pipe whose reader is gone
(EPIPE), stdout closed."""

from __future__ import annotations

import errno
import os
import resource
import sys
import traceback

import pytest

from cudaprobe.errors import OutputFailed
from cudaprobe.output.files import LazyOutputFile, StdoutStream, open_output

ROW = "r" * 59 + "\n"  # 60 bytes


def under_size_limit(body) -> None:
    """Run body() where files may not grow past 1000 bytes (Python ignores
    SIGXFSZ, so the write fails with EFBIG, after a partial write): in a forked
    child, so that pytest's own output (perhaps a file already past 1000 bytes)
    stays writable. The child's failure, traceback and all, is the test's."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        code = 0
        try:
            limit = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1000, limit[1]))
            body()
        except BaseException:
            os.write(write_fd, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        failure = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, failure


def test_a_full_file_keeps_whole_lines_and_counts_the_rest(tmp_path):
    def body() -> None:
        out = LazyOutputFile(str(tmp_path / "calls.jsonl"), force=False)
        out.write("header\n")
        out.write(ROW * 30)  # 7 + 1800 bytes: 1000 go out, the 17th row cut
        out.flush()
        assert out.failure is not None and out.failure.errno == errno.EFBIG
        assert out.cause == "output_efbig"
        out.write(ROW * 5)  # after the failure: dropped and counted
        assert (out.lines_out, out.lines_dropped) == (17, 14 + 5)
        assert out.rows_dropped(header_lines=1) == 19
        assert out.retry()
        out.write('{"summary":{}}\n')  # fits where the cut row was
        out.failure_said()
        out.close()
        text = (tmp_path / "calls.jsonl").read_text()
        assert text == "header\n" + ROW * 16 + '{"summary":{}}\n'

    under_size_limit(body)


def test_a_trailer_that_does_not_fit_leaves_the_whole_lines(tmp_path):
    def body() -> None:
        out = LazyOutputFile(str(tmp_path / "calls.jsonl"), force=False)
        out.write(ROW * 20)
        out.flush()
        assert out.retry()
        out.write("t" * 100 + "\n")
        out.flush()
        assert out.failure is not None
        with pytest.raises(OutputFailed, match="calls.jsonl failed: File too large"):
            out.close()  # nobody said it: the end of a report says it
        assert (tmp_path / "calls.jsonl").read_text() == ROW * 16

    under_size_limit(body)


def test_dev_full(tmp_path):
    out = open_output("/dev/full", force=True)
    out.write(ROW * 3)
    out.flush()
    assert out.failure is not None and out.cause == "output_enospc"
    assert out.lines_dropped == 3 and out.rows_dropped(0) == 3
    assert out.describe_failure() == "writing /dev/full failed: No space left on device"
    # what the trace says of it: rows lost, or (the rows out) only the summary
    assert out.failure_note({"output_enospc": 3}) == (
        "writing /dev/full failed: No space left on device: tracing stopped, 3 calls not "
        "written (counted as lost)")
    assert out.failure_note({}) == ("writing /dev/full failed: No space left on device: the "
                                    "summary was not written")


def test_a_pipe_whose_reader_is_gone_is_not_retried():
    read_end, write_end = os.pipe()
    os.close(read_end)
    saved = os.dup(1)
    os.dup2(write_end, 1)
    try:
        out = StdoutStream()
        out.write(ROW)
        out.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(write_end)
    assert out.failure is not None and out.cause == "output_epipe"
    assert not out.retry()
    assert out.failure_note({"output_epipe": 1}) is None  # `| head`: nothing to say


def test_closed_stdout_fails_without_writing(monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)  # what Python makes of `>&-`
    out = StdoutStream()
    out.write("header\n" + ROW * 2)
    assert out.cause == "output_ebadf" and out.describe_failure().endswith("stdout is closed")
    assert out.rows_dropped(header_lines=1) == 2 and not out.isatty()


def test_discarded_output_leaves_an_existing_file_alone(tmp_path):
    """--force, then stopped before -- COMMAND ran: the old file stays."""
    old = tmp_path / "calls.csv"
    old.write_text("old trace\n")
    out = open_output(str(old), force=True)
    out.write("header\n")
    out.discard()
    out.close()
    assert old.read_text() == "old trace\n"


def test_a_gz_file_is_written_compressed_and_reads_back_whole(tmp_path):
    """-o FILE.gz: the format's text, gzip-compressed as it goes; the format
    is the one the name before `.gz` picks."""
    import gzip  # noqa: PLC0415

    from cudaprobe.output.files import GzipOutputFile  # noqa: PLC0415
    from cudaprobe.output.formats import choose_format  # noqa: PLC0415

    path = tmp_path / "calls.jsonl.gz"
    out = open_output(str(path), force=False)
    assert isinstance(out, GzipOutputFile)
    for _ in range(3):
        out.write(ROW * 2000)  # past the buffer: flushed in batches
        out.flush()
    out.write('{"summary":{}}\n')
    out.close()
    assert gzip.decompress(path.read_bytes()).decode() == ROW * 6000 + '{"summary":{}}\n'
    assert path.stat().st_size < len(ROW) * 6000 // 20  # compressed
    assert (out.lines_out, out.lines_dropped, out.failed) == (6001, 0, None)
    assert choose_format(None, "run.chrome.json.gz") == "chrome"
    assert choose_format(None, "calls.JSONL.GZ") == "jsonl"
    assert choose_format(None, "rows.csv.gz") == "csv"
    assert choose_format(None, "trace.gz") == "table"


def test_a_gz_file_that_cannot_be_written_drops_its_lines_whole(tmp_path):
    """Its compressed bytes refused (the file may not grow past 1000 bytes):
    the batch's lines are dropped and counted, the failure kept and said."""
    from cudaprobe.output.files import GzipOutputFile  # noqa: PLC0415

    def body() -> None:
        out = GzipOutputFile(str(tmp_path / "calls.jsonl.gz"), force=False)
        # hex of random bytes: half as long compressed, far past 1000 bytes
        lines = [f"{i:08d} {os.urandom(24).hex()}\n" for i in range(4000)]
        out.write("".join(lines))
        out.flush()
        assert out.failure is not None and out.cause == "output_efbig"
        assert (out.lines_out, out.lines_dropped) == (0, 4000)
        out.write(ROW)  # after the failure: dropped and counted
        assert out.lines_dropped == 4001
        with pytest.raises(OutputFailed, match="calls.jsonl.gz failed: File too large"):
            out.close()

    under_size_limit(body)


def test_batches_handed_over_after_a_failed_one_are_dropped_and_counted(tmp_path):
    """Written from the writing thread: batches handed over one after another
    without waiting (each past the buffer, so each goes at once); the first
    fails part way (the size limit), the later ones are never tried. The file
    ends at its last whole line, every line is either out or counted dropped,
    and the failure is known once the session's thread accounts for it."""
    from cudaprobe.output.files import BUFFER  # noqa: PLC0415

    def body() -> None:
        path = tmp_path / "calls.jsonl"
        out = LazyOutputFile(str(path), force=False)
        per_batch = BUFFER // len(ROW) + 1
        for _ in range(6):
            out.write(ROW * per_batch)  # handed over: not written yet, maybe
        assert out.lines == 6 * per_batch
        out.flush()
        assert out.failure is not None and out.failure.errno == errno.EFBIG
        assert out.lines_out == 1000 // len(ROW)  # 16 whole rows fit
        assert out.lines_out + out.lines_dropped == 6 * per_batch
        assert path.read_bytes() == ROW.encode() * out.lines_out
        with pytest.raises(OutputFailed, match="File too large"):
            out.close()

    under_size_limit(body)


def test_a_file_is_written_in_the_order_its_batches_were_given(tmp_path):
    """Many batches of numbered lines, handed to the writing thread faster than
    it writes: the file holds each line once, in order."""
    path = tmp_path / "calls.jsonl"
    out = LazyOutputFile(str(path), force=False)
    n = 0
    for _ in range(200):
        lines = "".join(f"{n + i:09d} {'x' * 500}\n" for i in range(150))
        out.write_lines(lines, 150)
        n += 150
    out.close()
    numbers = [int(line.split()[0]) for line in path.read_text().splitlines()]
    assert numbers == list(range(n)) and out.lines_out == n
