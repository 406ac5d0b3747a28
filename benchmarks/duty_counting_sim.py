"""serve --duty --gpu-time --py-stacks's counting, simulated with made records
(no probes, no GPU): a job launching 25 kernels every 6 ms (20 on its main
thread, 5 on another) for SECONDS; a slice of 0.1 s a second (its start drawn
as serve draws it), the probes in from its start to 15 ms after its end,
CUPTI on all along (serve never switches it); the calls handed over every 20
ms, LAG seconds after they were made (a busy node's decoder behind), CUPTI's
records every 0.5 s. Prints all kernels against those counted by name
(exact) and by line (x 1/duty), and the exported relative error: what
CallMetrics and LineJoin make of a regular job, whose answer is known.

    LAG=3 python benchmarks/duty_counting_sim.py [SECONDS]   (from the repo root)
"""

from __future__ import annotations

import heapq
import os
import random
import sys

sys.path.insert(0, os.getcwd())
from cudaprobe.analysis.metrics import CallMetrics  # noqa: E402
from tests.unit.test_gpulines import S, api_of, kernel, launch  # noqa: E402

MS = 1_000_000
STEP_NS = 6 * MS
KERNELS = 25  # a step's launches: the first 20 on the main thread
LAG_NS = int(float(os.environ.get("LAG", "0.005")) * S)
CALLS_EVERY, CUPTI_EVERY = 20 * MS, 500 * MS


def periods(seconds: float, t0: int, rng: random.Random) -> list[dict[str, int]]:
    out = []
    for k in range(int(seconds)):
        b = t0 + k * S + int(rng.uniform(0, 0.2) * S)
        out.append({"begin": b, "end": b + 100 * MS, "probes_out": b + 115 * MS})
    return out


def within(t: int, spans: list[dict[str, int]], a: str, b: str) -> bool:
    return any(p[a] <= t <= p[b] for p in spans)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90
    now = [0]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    join = m.python_lines()
    m.weight = 10
    m.slices_only()
    t0, rng = 10 * S, random.Random(1)
    spans = periods(seconds, t0, rng)
    events: list[tuple] = []  # (time, order, kind, payload)

    def at(t: int, kind: str, payload: object = None) -> None:
        heapq.heappush(events, (t, len(events) + rng.random(), kind, payload))
    for p in spans:
        at(p["begin"] + MS, "traced")
        at(p["end"], "ended")
    end = t0 + int(seconds * S)
    every, correlation, t = 0, 0, t0 - S
    while t < end + S:
        for i in range(KERNELS):
            lt, correlation = t + i * (STEP_NS // KERNELS), correlation + 1
            c = launch(lt, 40 + i, tid=101 if i < 20 else 102)
            every += t0 <= lt < end
            if within(lt, spans, "begin", "probes_out"):
                at(lt + LAG_NS, "call", c)
            k = kernel(c, correlation, 100_000)
            k.start_ns, k.end_ns = lt + MS, lt + MS + 100_000
            at(lt + 2 * MS, "cupti", (c, correlation, k))
        t += STEP_NS
    calls: list = []
    cupti: list = []

    def hand_cupti() -> None:
        for c, corr, _ in cupti:
            join.api(c.pid, corr, api_of(c))
        m.add_gpu([k for _, _, k in cupti])
        cupti.clear()
    next_calls = next_cupti = t0 - S
    while events:
        t, _, kind, payload = heapq.heappop(events)
        while min(next_calls, next_cupti) <= t:
            if next_calls <= next_cupti:
                now[0], next_calls = next_calls, next_calls + CALLS_EVERY
                m.add(calls)
                calls = []
            else:
                now[0], next_cupti = next_cupti, next_cupti + CUPTI_EVERY
                hand_cupti()
        now[0] = t
        if kind == "traced":
            m.window_traced()
        elif kind == "ended":
            m.window_ended()
        elif kind == "call":
            calls.append(payload)
        else:
            cupti.append(payload)
    now[0] += S
    m.add(calls)
    hand_cupti()
    for _ in range(5):  # what waits is settled
        now[0] += 3 * S
        m.add_gpu([])
    snap = m.snapshot(now_ns=now[0])
    counted = sum(h.count for h in snap.gpu_time.values())
    # each kernel 100 us; every line's, those past the exported top lines too
    by_line = sum(m._gpu_lines.values()) / 100_000
    print(f"{seconds:g} s, calls {LAG_NS / S:g} s late: kernels launched in the {seconds:g} s "
          f"{every}, by name (launched from 1 s before to 1 s after) "
          f"{counted:.0f}, by line x10 {by_line:.0f} (ratio {by_line / every:.3f}), slices "
          f"{m.windows}, relative error "
          f"{ {k: round(v, 4) for k, v in snap.sampling_relative_error.items()} }, "
          f"unjoined {snap.gpu_lines_unjoined}")


if __name__ == "__main__":
    main()
