"""Line tables decoded here (decode/pylines.py) against the interpreter's own
answer, at every instruction of a few hundred code objects, on every CPython
3.9+ on the machine (pylines_dump.py runs under each)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudaprobe.decode import pylines

DUMP = Path(__file__).resolve().parent / "pylines_dump.py"
PYTHONS = sorted({sys.executable, *(
    p for p in glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))
    if p.rsplit("python", 1)[1] in ("3.9", "3.10", "3.11", "3.12", "3.13"))})


@pytest.mark.parametrize("python", PYTHONS)
def test_lines_match_the_interpreter(python):
    dump = json.loads(subprocess.run([python, str(DUMP)], capture_output=True, text=True,
                                     check=True).stdout)
    version = tuple(dump["version"])
    checked = 0
    for code in dump["codes"]:
        table = bytes.fromhex(code["table"])
        for offset, line in code["lines"]:
            assert pylines.line_at(version, table, code["first"], offset) == line, \
                (version, code["first"], offset)
            checked += 1
    assert checked > 1000


def test_a_cut_table_gives_no_line_past_its_end():
    table = bytes([0x80 | (13 << 3) | 0, 2])  # one unit, no columns, line +1
    assert pylines.location_line(table, 10, 0) == 11
    assert pylines.location_line(table, 10, 1) is None
    assert pylines.location_line(table[:1], 10, 0) is None  # cut inside the entry


def test_strings_by_kind():
    ascii_ = (1 << 2) | (1 << 5) | (1 << 6)
    assert pylines.unicode_text(ascii_, 3, b"abc" + bytes(40), 24) == ("abc", False)
    text = "é€"
    data = bytes(16) + text.encode("utf-16-le")
    assert pylines.unicode_text((2 << 2) | (1 << 5), 2, data, 16) == (text, False)
    snake = "\N{SNAKE}x"
    data = bytes(16) + snake.encode("utf-32-le")
    assert pylines.unicode_text((4 << 2) | (1 << 5), 2, data, 16) == (snake, False)
    latin = "café"
    assert pylines.unicode_text((1 << 2) | (1 << 5), 4, bytes(24) + latin.encode("latin-1"),
                                24) == (latin, False)
    assert pylines.unicode_text((1 << 2), 3, b"abc", 16) is None  # not compact: not read


def test_a_string_longer_than_its_copy_is_cut_at_a_character_and_marked():
    ascii_ = (1 << 2) | (1 << 5) | (1 << 6)
    assert pylines.unicode_text(ascii_, 10, b"abc", 24) == ("abc…", True)
    # UCS-4 with 16 bytes before its data: 2 whole characters of 40 bytes copied
    snake = "\N{SNAKE}" * 5
    data = (bytes(16) + snake.encode("utf-32-le"))[:27]
    assert pylines.unicode_text((4 << 2) | (1 << 5), 5, data, 16) == ("\N{SNAKE}" * 2 + "…", True)
    # a lone surrogate (an undecodable byte of a file name) is kept, not a reason to drop
    data = bytes(16) + b"a\x00\xdc\xdc"
    assert pylines.unicode_text((2 << 2) | (1 << 5), 2, data, 16) == ("a\udcdc", False)
    assert pylines.unicode_text(ascii_, 2, b"\xff\xfe", 0) is None  # not ASCII: not text
