"""Output files: checked before tracing starts, created only when the first
byte is written (so a failed start leaves nothing behind), mode 0600 (or
--mode) whatever the umask or the mode of a file --force overwrites.

Never through a symbolic link: root writing to a path in a shared directory
must not be redirected onto another file."""

from __future__ import annotations

import os
import stat
import sys
from typing import TextIO

from cudaprobe.errors import OutputError

DEFAULT_MODE = 0o600


def check_output_path(path: str, force: bool) -> None:
    if os.path.isdir(path):
        raise OutputError(f"output {path!r} is a directory")
    if os.path.islink(path):
        raise OutputError(f"output {path!r} is a symbolic link", fix="give the file it points to")
    if os.path.exists(path) and not force:
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


class LazyOutputFile:
    """A text stream that opens its file on first write, and counts bytes."""

    def __init__(self, path: str, force: bool, mode: int = DEFAULT_MODE) -> None:
        self.path = path
        self.force = force
        self.mode = mode
        self.written = 0
        self._file: TextIO | None = None

    def _open(self) -> TextIO:
        if self._file is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
            flags |= os.O_TRUNC if self.force else os.O_EXCL
            try:
                fd = os.open(self.path, flags, self.mode)
                if stat.S_ISREG(os.fstat(fd).st_mode):  # not /dev/null's mode
                    os.fchmod(fd, self.mode)
            except OSError as e:
                raise OutputError(f"cannot create {self.path!r}: {e.strerror}") from None
            self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 16)
        return self._file

    def write(self, text: str) -> int:
        self.written += len(text) if text.isascii() else len(text.encode())
        return self._open().write(text)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def open_output(path: str | None, force: bool, mode: int = DEFAULT_MODE) -> TextIO:
    if path is None or path == "-":
        return sys.stdout
    check_output_path(path, force)
    return LazyOutputFile(path, force, mode)  # type: ignore[return-value]
