"""Run a command with stdout and stderr on a pty of WIDTH columns, as a
person at a terminal of that size sees it; write what the terminal got,
colours and cursor moves taken out, to OUTFILE; exit with its status.

  python3 pty_run.py WIDTH OUTFILE -- COMMAND...
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def main() -> int:
    width, outfile, argv = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    data = bytearray()
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: no writer left
            break
        if not chunk:
            break
        data += chunk
    rc = proc.wait()
    text = ANSI.sub("", data.decode("utf-8", "replace")).replace("\r", "")
    with open(outfile, "w") as f:
        f.write(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
