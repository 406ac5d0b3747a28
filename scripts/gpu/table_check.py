"""Check a table a terminal showed (pty_run.py's file): every line within
the terminal's width in cells, one line a row, each allocation, copy and
launch row showing its size or kernel name at the start of DETAILS (exit 1
when not); and say its rows per function beside the CUPTI callback counter's
count of the same run (cupti_counter.c), which also counts the calls of
runtimes linked statically into other libraries (cuBLAS's), not probed.

  python3 table_check.py TABLE.txt WIDTH COUNTS [--events a,b,...]
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections import Counter

ROW = re.compile(r"^ +\d+\.\d{3} ")
SUFFIX = re.compile(r"(_v\d+)?(_ptsz|_ptds)?$")


def cells(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def main() -> int:
    path, width, counts_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    events = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else None
    lines = open(path, encoding="utf-8").read().splitlines()
    header = next(line for line in lines if line.startswith("  TIME(ms)"))
    details = header.rindex(" ") + 1
    titles = header.split()
    event_col = titles.index("EVENT")
    too_wide = [line for line in lines if cells(line) > width]
    rows = [line for line in lines if ROW.match(line)]
    per = Counter(SUFFIX.sub("", line.split()[event_col]) for line in rows)
    unread, unnamed = [], []
    for line in rows:
        event, text = line.split()[event_col], line[details:]
        if re.match(r"cuda(Malloc|Memcpy|Memset)", event) and not re.match(
                r"(size|count|bytes|ByteCount|N)=\d", text):
            unread.append(line)
        if re.match(r"cu(da)?Launch", event) and (not text or text.startswith(("func=", "f="))):
            unnamed.append(line)  # no kernel name: its address first
    cupti, label = Counter(), None  # its exit table: `# exit`, then `DOMAIN NAME N` lines
    for line in open(counts_path):
        if line.startswith("#"):
            label = line.split()[1]
        elif label == "exit" and len(line.split()) == 3:
            _domain, name, n = line.split()
            cupti[SUFFIX.sub("", name)] += int(n)
    wanted = events or set(per)
    differ = {e: (per[e], cupti[e]) for e in sorted(wanted) if per[e] != cupti[e]}
    ok = not too_wide and not unread and rows  # the counts are said: static runtimes differ
    print(f"{width} columns: {len(rows)} rows, DETAILS {width - details} cells, "
          f"{len(too_wide)} lines too wide, {len(unread)} rows without their size or kernel "
          f"first, {len(unnamed)} launches not named, rows vs CUPTI per function: "
          f"{'equal' if not differ else differ} ({dict(per)}) -> {'OK' if ok else 'FAIL'}")
    for line in (too_wide + unread + unnamed)[:5]:
        print("  ", line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
