"""The picture of a table for the docs: from what a terminal showed
(pty_run.py's file), its header and the first N rows of each function, in
the order they came, and the closing lines.

  python3 table_picture.py SHOWN.txt [N]
"""

from __future__ import annotations

import re
import sys
from collections import Counter

ROW = re.compile(r"^ +\d+\.\d{3} ")


def main() -> None:
    lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    header = next(i for i, line in enumerate(lines) if line.startswith("  TIME(ms)"))
    titles = lines[header].split()
    event = titles.index("EVENT")
    seen: Counter = Counter()
    print(lines[header])
    for line in lines[header + 1:]:
        if ROW.match(line):
            name = line.split()[event]
            seen[name] += 1
            if seen[name] <= n:
                print(line)
    print("...")
    rest = [line for line in lines[header + 1:] if not ROW.match(line)]
    print("\n".join(rest[-12:]))


if __name__ == "__main__":
    main()
