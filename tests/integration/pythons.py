"""The CPython interpreters the --py-stacks tests run: pyenv's 3.9 to 3.13
(libpython shared) and Debian's 3.11 (libpython linked into the executable),
those this machine has."""

from __future__ import annotations

import glob
import os

PYTHONS = sorted(p for p in glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))
                 if p.rsplit("python", 1)[1] in ("3.9", "3.10", "3.11", "3.12", "3.13"))
PYTHONS += [p for p in ("/usr/bin/python3.11",) if os.path.exists(p)]
