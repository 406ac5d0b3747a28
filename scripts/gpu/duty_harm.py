"""Is a running PyTorch job harmed by `serve --duty --gpu-time --py-stacks`
coming and going? One workload (scripts/gpu/lines_workload.py, every step
synchronised) runs while serve starts on the node CYCLES times, each time
put into it (the GPU-time library's call ties switched with the slices),
runs --hold seconds and is stopped with SIGINT (or, with --kill N, killed
with SIGKILL on every Nth cycle). After each cycle: is the workload alive,
and how far its log has gone. At the end: its exit status and its printed
result. Where it died: when, against the cycles' stamps, and what it said
(PYTHONFAULTHANDLER is set: its Python stacks; with ABORT_BT=abort_bt.so
in the environment, preloaded into it: its native frames). --no-gpu-time:
the probes' slices alone, --work-only: without --py-stacks (to tell which
part harms). Appends to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def say(out: str, text: str) -> None:
    print(text, flush=True)
    with open(out, "a") as f:
        f.write(text + "\n")


def last_log(path: str) -> float:
    try:
        lines = open(path).read().splitlines()
        return json.loads(lines[-1])["t"] if lines else 0.0
    except (OSError, ValueError):
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--python", default="/opt/torch/.venv/bin/python")
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--kill", type=int, default=0, help="SIGKILL on every Nth cycle")
    ap.add_argument("--duty", default="10%")
    ap.add_argument("--duty-period", default="1")
    ap.add_argument("--work-only", action="store_true")
    ap.add_argument("--no-gpu-time", action="store_true", help="the probes' slices alone")
    a = ap.parse_args()
    tag = f"/tmp/harm-{os.getpid()}"
    ready, log = f"{tag}.ready", f"{tag}.log"
    work_err = open(f"{tag}.work-err", "w+")
    budget = a.cycles * (a.hold + 10) + 20  # the cycles take about hold + 8 s each
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    if os.environ.get("ABORT_BT"):  # scripts/gpu/abort_bt.c: the native frames at a fatal signal
        env["LD_PRELOAD"] = os.environ["ABORT_BT"]
    work = subprocess.Popen([a.python, "scripts/gpu/lines_workload.py", "--seconds", str(budget),
                             "--log", log, "--ready", ready, "--batch", "1"],
                            stdout=subprocess.PIPE, stderr=work_err, text=True, env=env)
    while not os.path.exists(ready):
        if work.poll() is not None:
            raise SystemExit("the workload ended before it was ready")
        time.sleep(0.1)
    serve_gpu = ([] if a.no_gpu_time else ["--gpu-time"]) + ([] if a.work_only else ["--py-stacks"])
    say(a.out, f"workload pid {work.pid} ready at {time.monotonic():.1f}; {a.cycles} cycles, "
               f"serve --duty {a.duty} --duty-period {a.duty_period} "
               f"{' '.join(serve_gpu)}, held {a.hold:g} s each"
               f"{f', SIGKILL every {a.kill}th' if a.kill else ''}")
    for i in range(1, a.cycles + 1):
        err_path = f"{tag}.serve{i}.err"
        t0 = time.monotonic()
        serve = subprocess.Popen(
            [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", "127.0.0.1:9471",
             "--api", "driver", "--lib", a.lib, "--duty", a.duty, "--duty-period",
             a.duty_period, *serve_gpu],
            stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
        deadline = t0 + 40
        while (time.monotonic() < deadline and serve.poll() is None and work.poll() is None
               and ("serving Prometheus" if a.no_gpu_time else "recording in pid")
               not in open(err_path).read()):
            time.sleep(0.1)
        t_rec = time.monotonic()
        time.sleep(a.hold)
        killed = a.kill and i % a.kill == 0
        t_stop = time.monotonic()
        serve.send_signal(signal.SIGKILL if killed else signal.SIGINT)
        try:
            serve.wait(timeout=90)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        t_end = time.monotonic()
        said = open(err_path).read()
        gpu = [t for t in said.splitlines() if "gpu" in t.lower() or "Error" in t][-3:]
        say(a.out, f"cycle {i}: recording after {t_rec - t0:.1f} s, "
                   f"{'SIGKILL' if killed else 'SIGINT'} at {t_stop:.1f}, serve exit "
                   f"{serve.returncode} in {t_end - t_stop:.1f} s; workload "
                   f"{'alive' if work.poll() is None else f'DEAD ({work.returncode})'}, "
                   f"its log at {last_log(log):.1f}; {' | '.join(gpu)[:300]}")
        if work.poll() is not None:
            break
        time.sleep(2)
    try:
        printed = work.communicate(timeout=budget + 60)[0]
    except subprocess.TimeoutExpired:
        work.kill()
        printed = work.communicate()[0]
    work_err.seek(0)
    said = work_err.read().splitlines()
    say(a.out, f"workload exit {work.returncode} at {time.monotonic():.1f}, printed "
               f"{len(printed)} characters, its log last at {last_log(log):.1f}"
               f"{'' if not printed.strip() else ', steps ' + str(json.loads(printed)['steps'])}")
    for t in said[-60:]:
        say(a.out, f"  workload: {t}")


if __name__ == "__main__":
    main()
