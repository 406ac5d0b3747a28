"""Output files: checked before tracing starts, created only when the first
byte is written (so a failed start leaves nothing behind), mode 0600."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from .errors import OutputError


def check_output_path(path: str, force: bool) -> None:
    if os.path.isdir(path):
        raise OutputError(f"output {path!r} is a directory")
    if os.path.exists(path) and not force:
        raise OutputError(f"output {path!r} exists", fix="use --force to overwrite it")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"output directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise OutputError(f"output {path!r} is not writable")


class LazyOutputFile:
    """A text stream that opens its file on first write."""

    def __init__(self, path: str, force: bool, mode: int = 0o600) -> None:
        self.path = path
        self.force = force
        self.mode = mode
        self._file: TextIO | None = None

    def _open(self) -> TextIO:
        if self._file is None:
            flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if self.force else os.O_EXCL)
            try:
                fd = os.open(self.path, flags, self.mode)
            except OSError as e:
                raise OutputError(f"cannot create {self.path!r}: {e.strerror}") from None
            self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 16)
        return self._file

    def write(self, text: str) -> int:
        return self._open().write(text)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def open_output(path: str | None, force: bool) -> TextIO:
    if path is None or path == "-":
        return sys.stdout
    check_output_path(path, force)
    return LazyOutputFile(path, force)  # type: ignore[return-value]
