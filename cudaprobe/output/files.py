"""Output files and stdout: checked before tracing starts, a file created only
when the first bytes are written out (so a failed start leaves nothing
behind, and an existing file --force overwrites is kept), mode 0600 (or
--mode) whatever the umask or the mode of a file --force overwrites.

Never through a symbolic link: root writing to a path in a shared directory
must not be redirected onto another file.

A write that fails (a full disk, EIO, a reader gone: EPIPE, stdout closed)
never raises into the reporter writing: the stream remembers the first
failure, cuts a regular file back to its last whole line, drops what is
written after it and counts the lines dropped, so that the session can stop
tracing, count them as lost and say so (sessions/trace.py). The reporters
write text; lines are what the stream can count without knowing the format.
"""

from __future__ import annotations

import collections
import errno
import os
import queue
import stat
import sys
import threading
import zlib
from typing import Callable

from cudaprobe.errors import OutputError, OutputFailed

DEFAULT_MODE = 0o600
BUFFER = 1 << 16  # bytes held before a write(2)
GZIP_SUFFIX = ".gz"  # -o FILE.gz: written gzip-compressed, its format from what is before
QUEUED = 4  # batches handed to the writing thread and not written yet, at most


def check_output_path(path: str, force: bool) -> None:
    if os.path.isdir(path):
        raise OutputError(f"output {path!r} is a directory")
    if os.path.islink(path):
        raise OutputError(f"output {path!r} is a symbolic link", fix="give the file it points to")
    if os.path.exists(path) and not force and not _discards(path):
        raise OutputError(f"output {path!r} exists", fix="use --force to overwrite it")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"output directory {parent!r} does not exist")
    # access() says yes to root nearly everywhere: try it for real, leaving no trace
    try:
        if os.path.exists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK))
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             DEFAULT_MODE))
            os.unlink(path)
    except OSError as e:
        raise OutputError(f"output {path!r} is not writable: {e.strerror}") from None


def _discards(path: str) -> bool:
    """/dev/null (a character device): nothing in it to overwrite."""
    try:
        return stat.S_ISCHR(os.stat(path).st_mode) and os.path.samefile(path, os.devnull)
    except OSError:
        return False


class OutputStream:
    """A text stream over a file descriptor: buffered, written with os.write,
    failures remembered (see the module docstring), never raised on write."""

    encoding = "utf-8"
    threaded = False  # written from a Writer thread (files and pipes, not terminals)

    def __init__(self, name: str) -> None:
        self.name = name  # as said to the user
        self.written = 0  # bytes given to write(): what --max-size counts
        self.failure: OSError | None = None
        # the first failure, kept when retry() clears `failure` for the trailer:
        # what the trace lost is said whether or not the trailer fitted
        self.failed: OSError | None = None
        self.lines = 0  # lines given to write()
        self.lines_out = 0  # lines written out whole
        self.lines_dropped = 0  # lines not written (whole or cut) since the failure
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_lines = 0  # counted once, as written: _send is told
        self._reported = False
        self._writer: Writer | None = None  # made at the first batch handed over
        # on a terminal, what a data format writes is shown through this
        # (text.terminal_lines): files and pipes get the exact bytes
        self.shown: Callable[[str], str] | None = None

    def _fd(self) -> int:
        raise NotImplementedError

    def write(self, text: str) -> int:
        self._add((text if self.shown is None else self.shown(text)).encode())
        return len(text)

    def write_lines(self, text: str, lines: int) -> int:
        """`text` of `lines` lines exactly (rows a line each): not counted again."""
        if self.shown is not None:
            return self.write(text)
        self._add(text.encode(), lines)
        return len(text)

    def write_data(self, data: bytes | memoryview, lines: int) -> None:
        """Bytes of `lines` whole lines, as they are (rows made elsewhere, in
        memory the stream may keep until written: not for a terminal, whose
        text is shown)."""
        self._add(data, lines)

    def write_packed(self, packed: str, lines: int | None = None) -> int:
        """`packed`: UTF-8 bytes held as a str, a character each (pack()): the
        bytes as they are, or on a terminal the text they spell, shown.
        `lines`: how many line breaks it holds, where the caller knows."""
        if self.shown is not None:
            return self.write(packed.encode("latin-1").decode())
        self._add(packed.encode("latin-1"), lines)
        return len(packed)

    def _add(self, data: bytes, lines: int | None = None) -> None:
        if lines is None:
            lines = data.count(b"\n")  # the one count of these bytes' lines
        self.written += len(data)
        self.lines += lines
        if self.failure is not None:
            self.lines_dropped += lines
        else:
            self._pending.append(data)
            self._pending_bytes += len(data)
            self._pending_lines += lines
            if self._pending_bytes >= BUFFER:
                self.hand_over()

    def hand_over(self) -> None:
        """What is held goes out (from the writing thread, without waiting for
        it where there is one); the writes that finished meanwhile accounted."""
        if self._pending:
            # a batch of rows as big as the buffer goes as it is, not copied again
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            lines = self._pending_lines
            self._pending, self._pending_bytes, self._pending_lines = [], 0, 0
            if not self.threaded or self.shown is not None:  # a terminal: as it is shown
                self._send(data, lines)
                return
            if self._writer is None:
                self._writer = Writer(self._job)
            self._writer.put(data, lines)
        self._settle(wait=False)

    def flush(self) -> None:
        """Everything given written out, or its failure accounted."""
        self.hand_over()
        self._settle(wait=True)

    def _settle(self, wait: bool) -> None:
        """The writing thread's finished batches accounted, in order (`wait`:
        all of those handed over)."""
        if self._writer is None:
            return
        for data, lines, done, error, skipped in self._writer.finished(wait):
            if skipped:  # after a failed batch: never tried
                self.lines_dropped += lines
            else:
                self._account(data, lines, done, error)

    def _send(self, data: bytes, lines: int) -> None:
        """A batch of whole lines (`lines` of them) out, now."""
        self._account(data, lines, *self._job(data))

    def _job(self, data: bytes) -> tuple[int, OSError | None]:
        """The batch's write(2)s (on the writing thread, where there is one):
        the bytes that went, and the failure that stopped them."""
        return self._write_all(data)

    def _account(self, data: bytes, lines: int, done: int, error: OSError | None) -> None:
        """A batch written (`done` bytes of it) or failed: where it failed, its
        whole lines kept."""
        if error is not None:
            self._fail(error, data, done)
        else:
            self.lines_out += lines

    def _write_all(self, data: bytes) -> tuple[int, OSError | None]:
        """`data` written out: the bytes that went, and the failure that stopped it."""
        done = 0
        try:
            fd = self._fd()
            while done < len(data):
                done += os.write(fd, data[done:])
        except OSError as e:
            return done, e
        return done, None

    def _fail(self, error: OSError, data: bytes | memoryview, done: int) -> None:
        """`done` bytes of `data` went out: keep its whole lines, drop the rest."""
        data = bytes(data)  # (rows made elsewhere come as a view)
        self.failure = error
        self.failed = self.failed or error
        whole = data.rfind(b"\n", 0, done) + 1
        if done > whole:  # a cut line: a regular file loses it, a pipe keeps it
            try:
                fd = self._fd()
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    end = os.lseek(fd, 0, os.SEEK_CUR) - (done - whole)
                    os.ftruncate(fd, end)
                    os.lseek(fd, end, os.SEEK_SET)
            except OSError:
                pass  # the cut line stays: the failure is said either way
        self.lines_out += data.count(b"\n", 0, whole)
        self.lines_dropped += data.count(b"\n", whole)

    def rows_dropped(self, header_lines: int) -> int:
        """Lines dropped that were rows, not the first `header_lines` (a header)."""
        return self.lines_dropped - max(0, header_lines - self.lines_out)

    def retry(self) -> bool:
        """After a failure, try once more (the trailer may fit where a batch of
        rows did not); False when it cannot work (the reader is gone, stdout closed)."""
        self.flush()
        if self.failure is None:
            return True
        if self.failure.errno in (errno.EPIPE, errno.EBADF):
            return False
        self.failure = None
        if self._writer is not None:
            self._writer.stopped = False
        return True

    def discard(self) -> None:
        """Forget what is not written out yet (a trace that never ran)."""
        self._pending, self._pending_bytes, self._pending_lines = [], 0, 0

    @property
    def cause(self) -> str:
        """The first failure, as a key of the summary's `lost`: `output_enospc`."""
        code = self.failed.errno if self.failed is not None else None
        return "output_" + errno.errorcode.get(code or 0, "error").lower()

    def describe_failure(self) -> str:
        failure = self.failed or self.failure
        why = failure.strerror if failure is not None and failure.strerror else str(failure)
        return f"writing {self.name} failed: {why}"

    def failure_note(self, lost: dict[str, int]) -> str | None:
        """The line that says what the failure cost the trace, `lost` being the
        summary's losses; None where nothing is to be said (a closed pipe:
        `| head` is the reader's choice)."""
        if self.cause == "output_epipe":
            return None
        if self.cause in lost:
            return (f"{self.describe_failure()}: tracing stopped, {lost[self.cause]} calls "
                    "not written (counted as lost)")
        return f"{self.describe_failure()}: the summary was not written"  # the rows went out

    def failure_said(self) -> None:
        """The failure was handled and said: close() need not raise it."""
        self._reported = True

    def isatty(self) -> bool:
        return False

    def _close_fd(self) -> None:
        """Files close theirs; stdout stays open."""

    def close(self) -> None:
        """Write out what is left; a failure nobody said raises OutputFailed
        (a report written at the end: one line, exit 1; EPIPE quietly)."""
        self.flush()
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        self._close_fd()
        if self.failure is not None and not self._reported:
            self._reported = True
            raise OutputFailed(self.describe_failure(), self.failure.errno)


class LazyOutputFile(OutputStream):
    """A file opened when the first bytes are written out."""

    threaded = True

    def __init__(self, path: str, force: bool, mode: int = DEFAULT_MODE) -> None:
        super().__init__(path)
        self.path = path
        self.force = force
        self.mode = mode
        self._fileno = -1
        self._created = False

    def _fd(self) -> int:
        if self._fileno < 0:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            flags |= os.O_TRUNC if self.force or _discards(self.path) else os.O_EXCL
            self._fileno = os.open(self.path, flags, self.mode)
            self._created = True
            if stat.S_ISREG(os.fstat(self._fileno).st_mode):  # not /dev/null's mode
                os.fchmod(self._fileno, self.mode)
        return self._fileno

    def describe_failure(self) -> str:
        failure = self.failed or self.failure
        if not self._created and failure is not None:
            return f"cannot create {self.path!r}: {failure.strerror}"
        return super().describe_failure()

    def _close_fd(self) -> None:
        if self._fileno >= 0:
            fd, self._fileno = self._fileno, -1
            try:
                os.close(fd)
            except OSError as e:  # NFS, some FUSE: a failed write said at close
                self.failure = self.failure or e


class GzipOutputFile(LazyOutputFile):
    """-o FILE.gz: what the format writes, gzip-compressed as it goes (zcat,
    Perfetto and Python's gzip read it). A batch whose compressed bytes fail
    to go out has its lines dropped whole, and the file ends there (a reader
    takes what was before). Lines are counted out when compressed: the last
    of them reach the file with the gzip trailer at close."""

    def __init__(self, path: str, force: bool, mode: int = DEFAULT_MODE) -> None:
        super().__init__(path, force, mode)
        self._zip = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip format

    def _job(self, data: bytes) -> tuple[int, OSError | None]:
        """Compressed and written (on the writing thread): all of it or none."""
        _, error = self._write_all(self._zip.compress(data))
        return (0, error) if error is not None else (len(data), None)

    def _account(self, data: bytes, lines: int, done: int, error: OSError | None) -> None:
        if error is not None:  # compressed bytes cut: the batch's lines dropped whole
            self.failure = error
            self.failed = self.failed or error
            self.lines_dropped += lines
        else:
            self.lines_out += lines

    def close(self) -> None:
        self.flush()
        if self.failed is None:  # the rest the compressor holds, and the trailer
            _, error = self._write_all(self._zip.flush())
            self._account(b"", 0, 0, error)
        super().close()


class Writer:
    """A stream's batches written out on a thread of its own, in the order
    given (`job`: a batch -> the bytes that went, and the failure). After a
    batch fails, the later ones are not tried until `stopped` is cleared
    (a retry): they come back skipped. At most QUEUED batches wait: more
    blocks the session's thread, as a slow disk would."""

    def __init__(self, job: Callable[[bytes], tuple[int, OSError | None]]) -> None:
        self._job = job
        self._todo: queue.Queue[tuple[bytes, int] | None] = queue.Queue(maxsize=QUEUED)
        # (data, lines, bytes written, failure, skipped), in order, not accounted yet
        self._done: collections.deque[tuple[bytes, int, int, OSError | None, bool]] = \
            collections.deque()
        self.stopped = False
        self._thread = threading.Thread(target=self._run, name="cudaprobe-write", daemon=True)
        self._thread.start()

    def put(self, data: bytes, lines: int) -> None:
        self._todo.put((data, lines))

    def finished(self, wait: bool) -> list[tuple[bytes, int, int, OSError | None, bool]]:
        """The batches written or failed since the last call (`wait`: all given)."""
        if wait:
            self._todo.join()
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def stop(self) -> None:
        """After finished(wait=True): the thread ends."""
        self._todo.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (batch := self._todo.get()) is not None:
            data, lines = batch
            if self.stopped:
                self._done.append((data, lines, 0, None, True))
            else:
                try:
                    done, error = self._job(data)
                except Exception as e:  # noqa: BLE001 (a bug here must not hang the session)
                    done, error = 0, OSError(errno.EIO, f"writing failed: {e!r}")
                self.stopped = error is not None
                self._done.append((data, lines, done, error, False))
            self._todo.task_done()
        self._todo.task_done()


def stdout_closed() -> bool:
    """Whether cudaprobe started with fd 1 closed (`>&-`): Python's sys.stdout is
    None then, or the CLI's stand-in that fails every write (cli.ClosedStdout)."""
    return sys.stdout is None or getattr(sys.stdout, "closed_at_start", False)


class StdoutStream(OutputStream):
    """cudaprobe's stdout (fd 1), written around sys.stdout so that a failure is
    this stream's and Python's own flush at exit has nothing left to fail."""

    threaded = True

    def __init__(self) -> None:
        super().__init__("stdout")
        if stdout_closed():  # started with fd 1 closed (`>&-`)
            self.failure = self.failed = OSError(errno.EBADF, "stdout is closed")

    def _fd(self) -> int:
        return 1

    def isatty(self) -> bool:
        return self.failure is None and os.isatty(1)


class StderrStream(StdoutStream):
    """cudaprobe's stderr (fd 2): where `trace -- COMMAND` writes without -o, as
    strace does, so that the command keeps stdout to itself."""

    def __init__(self) -> None:
        OutputStream.__init__(self, "stderr")
        if sys.stderr is None:
            self.failure = self.failed = OSError(errno.EBADF, "stderr is closed")

    def _fd(self) -> int:
        return 2

    def isatty(self) -> bool:
        return self.failure is None and os.isatty(2)


def open_output(path: str | None, force: bool, mode: int = DEFAULT_MODE,
                command: bool = False) -> OutputStream:
    """-o FILE, or stdout (`-o -`, or no -o); with no -o and a -- COMMAND, stderr."""
    if path is None and command:
        return StderrStream()
    if path is None or path == "-":
        return StdoutStream()
    check_output_path(path, force)
    if path.lower().endswith(GZIP_SUFFIX):  # compressed as it is written
        return GzipOutputFile(path, force, mode)
    return LazyOutputFile(path, force, mode)
