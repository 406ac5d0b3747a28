"""Runs cudaprobe with the GPU-time alignment's inputs printed (a diagnosis)."""
import sys

from cudaprobe.decode import gputime as g

orig = g.align


def align(work, threads, starts):
    apis = sorted({id(w.api): w.api for w in work if w.api is not None}.values(),
                  key=lambda a: a.start_ns)
    print(f"DEBUG work {len(work)} with api {sum(w.api is not None for w in work)}, "
          f"api records {len(apis)}", file=sys.stderr)
    tids = {}
    for a in apis:
        tids[(a.tid, a.function)] = tids.get((a.tid, a.function), 0) + 1
    print("DEBUG api (tid, function) counts", sorted(tids.items(), key=lambda x: -x[1])[:8],
          file=sys.stderr)
    print("DEBUG threads of rows", [(k, len(v)) for k, v in list(threads.items())[:8]],
          file=sys.stderr)
    for a in apis[:3] + apis[len(apis) // 2:len(apis) // 2 + 3]:
        print("DEBUG api", a, file=sys.stderr)
    for k, v in list(threads.items())[:2]:
        for c in v[:3] + v[len(v) // 2:len(v) // 2 + 3]:
            print("DEBUG call", k, c.event, c.ts_ns, c.duration_ns, file=sys.stderr)
    if work:
        print("DEBUG work times", min(w.start_ns for w in work), max(w.end_ns for w in work),
              file=sys.stderr)
    r = orig(work, threads, starts)
    print("DEBUG shift", r, file=sys.stderr)
    return r


g.align = align
from cudaprobe.cli import main  # noqa: E402

main(prog_name="cudaprobe")
