"""What putting rows in call order costs the JSONL hot path, per record.

Decodes the same records to JSONL (a) as the ring gave them and (b) through
decode.nesting.CallOrder first, as `trace` does, side by side in one process;
on a tree without CallOrder only (a) runs, to compare trees. Records: a thread's
runtime calls, each with 0 or 2 driver calls inside (`--driver`), on 4 threads.

    PYTHONPATH=. python benchmarks/order_cost.py [--driver] [-n 200000]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # or the tree in PYTHONPATH

from cudaprobe.decode.records import RecordDecoder  # noqa: E402
from cudaprobe.output.jsonl import JsonlReporter  # noqa: E402
from cudaprobe.probe.event import RECORD_STRUCTS  # noqa: E402
from tests.unit.eventbuild import EVERY_PROBE  # noqa: E402

try:
    from cudaprobe.decode.nesting import CallOrder
except ImportError:  # a tree before it
    CallOrder = None


def record(symbol: str, ts: int, dur: int, tid: int) -> tuple:
    probe = next(p for p in EVERY_PROBE if p.symbol == symbol)
    n = probe.function.words
    values = (ts, dur, 7, tid, probe.func_id, n, 0, 35, b"bench", 0, -1, *range(1, n + 1))
    return RECORD_STRUCTS[n].unpack(RECORD_STRUCTS[n].pack(*values))


def records(n: int, driver: bool) -> list[tuple]:
    out = []
    ts = 1_000_000
    while len(out) < n:
        for tid in range(4):
            if driver:  # exit order: the driver calls, then the runtime call around them
                out.append(record("cuDriverGetVersion", ts + 100, 50, tid))
                out.append(record("cuDeviceGetCount", ts + 200, 50, tid))
            out.append(record("cudaMalloc" if tid % 2 else "cudaFree", ts, 1000, tid))
            ts += 1000
    return out[:n]


def best_of(rounds: int, fn) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--driver", action="store_true")
    args = ap.parse_args()
    recs = records(args.n, args.driver)
    batches = [recs[i:i + 256] for i in range(0, len(recs), 256)]

    def plain() -> None:
        r, d = JsonlReporter(io.StringIO()), RecordDecoder(EVERY_PROBE, 0)
        for b in batches:
            r.records(b, d)

    def ordered() -> None:
        r, d = JsonlReporter(io.StringIO()), RecordDecoder(EVERY_PROBE, 0)
        order = CallOrder([p.function.api == "runtime" for p in EVERY_PROBE])
        for b in batches:
            out, marks = order.add(b)
            r.records(out, d, marks)
        out, marks = order.flush()
        r.records(out, d, marks)

    a = best_of(5, plain) / len(recs) * 1e6
    print(f"as arrived: {a:.2f} µs a record")
    if CallOrder is not None:
        b = best_of(5, ordered) / len(recs) * 1e6
        print(f"in call order: {b:.2f} µs a record ({b / a:.2f}x)")


if __name__ == "__main__":
    main()
