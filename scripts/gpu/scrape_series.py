"""Scrapes a /metrics address as Prometheus would, in OpenMetrics, every
INTERVAL seconds until FILE's STOP exists, and keeps each scrape with its time:
what dashboard_replay.py gives a real Prometheus where none can run (the GPU
host: its binary does not travel with the kit).

    python3 scripts/gpu/scrape_series.py URL OUT.gz --stop FILE [--interval 5]

OUT.gz: each scrape as a line `# scrape UNIX_SECONDS` followed by its text.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
import urllib.request

ACCEPT = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--stop", required=True)
    ap.add_argument("--interval", type=float, default=5.0)
    a = ap.parse_args()
    n = 0
    with gzip.open(a.out, "wt") as out:
        while True:
            now = time.time()
            try:
                req = urllib.request.Request(a.url, headers={"Accept": ACCEPT})
                with urllib.request.urlopen(req, timeout=4) as r:
                    text = r.read().decode()
                out.write(f"# scrape {now:.3f}\n{text}")
                n += 1
            except OSError as e:
                print(f"scrape failed: {e}", flush=True)
            if os.path.exists(a.stop):
                break
            time.sleep(max(0.0, now + a.interval - time.time()))
    print(f"{n} scrapes", flush=True)


if __name__ == "__main__":
    main()
