"""`serve --gpu-time --py-stacks` against the workload's own CUDA events
(scripts/gpu/lines_workload.py): each line's GPU seconds as scraped, beside
what the events between its lines measured.

  launched: serve -- python lines_workload.py, every call traced; the
            metric is read once the workload has finished (it waits).
  node:     the workload runs first; serve starts on the node (no target:
            the GPU-time library put into it mid-run) with --duty; read
            after --seconds, against the events over serve's window.

Backward work counts under its forward op's line: `layer` and `loss` hold
the backward pass's kernels, which the events measure on the `backward`
line; the three are compared as one group too. Appends to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

PORT = 9470


def scrape() -> dict[str, float]:
    """cudaprobe_gpu_line_seconds_total by line, and the unjoined counts."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "cudaprobe_gpu_line_seconds_total":
                out[s.labels["line"]] = out.get(s.labels["line"], 0) + s.value
            elif s.name == "cudaprobe_gpu_line_unjoined_total":
                out[f"[unjoined {s.labels['reason']}]"] = s.value
            elif s.name == "cudaprobe_gpu_kernel_duration_seconds_sum":
                out["[all kernels]"] = out.get("[all kernels]", 0) + s.value
                key = f"[kernel] {s.labels['kernel'][:90]}"
                out[key] = out.get(key, 0) + s.value
            elif s.name == "cudaprobe_gpu_kernel_duration_seconds_count":
                key = f"[count] {s.labels['kernel'][:90]}"
                out[key] = out.get(key, 0) + s.value
            elif s.name == "cudaprobe_sampled_windows_total":
                out["[slices]"] = s.value
            elif s.name == "cudaprobe_sampling_relative_error":
                out[f"[relerr] {s.labels['quantity']}"] = s.value
            elif s.name == "cudaprobe_lost_events_total" and s.value:
                out[f"[lost {s.labels.get('cause', '')}]"] = s.value
    return out


def wait_serving(err_path: str, serve: subprocess.Popen) -> None:
    while "serving Prometheus" not in open(err_path).read():
        if serve.poll() is not None:
            raise SystemExit(f"serve did not start: {open(err_path).read()}")
        time.sleep(0.1)


def by_place(lines: dict[str, str], got: dict[str, float]) -> dict[str, str]:
    """Each workload line's label as scraped: matched by `file:line`, the function's
    name being the interpreter's (a qualified name from 3.11 on)."""
    places = {label.split(" (")[0]: label for label in got}
    return {name: places.get(text.split(" (")[0], text) for name, text in lines.items()}


def compare(lines: dict[str, str], events_ms: dict[str, float], got: dict[str, float],
            scale: str) -> list[str]:
    lines = by_place(lines, got)
    out = [f"{'line':<10} {'cudaprobe s':>12} {'events s':>10} {'ratio':>7} {'share':>7} "
           f"{'events share':>12}   ({scale})"]
    total_got = sum(v for k, v in got.items() if not k.startswith("["))
    total_ev = sum(events_ms.values()) / 1e3
    for name, label in lines.items():
        g, e = got.get(label, 0.0), events_ms[name] / 1e3
        out.append(f"{name:<10} {g:>12.4f} {e:>10.4f} {g / e if e else 0:>7.3f} "
                   f"{g / total_got if total_got else 0:>7.1%} {e / total_ev:>12.1%}")
    group = [lines[n] for n in ("layer", "loss", "backward")]
    g = sum(got.get(k, 0.0) for k in group)
    e = sum(events_ms[n] for n in ("layer", "loss", "backward")) / 1e3
    out.append(f"{'layer+loss+backward':<19} {g:>12.4f} {e:>10.4f} {g / e if e else 0:>7.3f}")
    others = {k: v for k, v in got.items()
              if k not in lines.values() and not k.startswith("[") and v > 0}
    for k, v in sorted(others.items(), key=lambda kv: -kv[1]):
        out.append(f"  other line: {k}: {v:.4f} s")
    for k, v in sorted(got.items()):
        if k.startswith("[") and not k.startswith(("[kernel]", "[count]")):
            out.append(f"  {k}: {v:g}")
    kernels = sorted(((v, k) for k, v in got.items() if k.startswith("[kernel]")), reverse=True)
    out += [f"  {k}: {v:.4f} s in {got.get('[count]' + k[8:], 0):.0f}" for v, k in kernels[:12]]
    out.append(f"all lines {total_got:.4f} s, all events {total_ev:.4f} s")
    return out


def launched(a: argparse.Namespace) -> list[str]:
    tag = f"/tmp/lines-{os.getpid()}"
    hold, log, err_path = f"{tag}.hold", f"{tag}.log", f"{tag}.err"
    err = open(err_path, "w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", f"127.0.0.1:{PORT}",
         "--api", "driver", "--gpu-time", "--py-stacks", "--", a.python,
         "scripts/gpu/lines_workload.py", "--seconds", str(a.seconds), "--log", log,
         "--hold", hold], stdout=subprocess.PIPE, stderr=err, text=True)
    wait_serving(err_path, serve)
    result = json.loads(serve.stdout.readline())
    last, same = None, 0
    while same < 3:  # the last records read: the sums stay put for three reads
        time.sleep(1)
        got = scrape()
        same = same + 1 if got == last else 0
        last = got
    open(hold, "w").close()
    serve.wait(timeout=120)
    said = open(err_path).read()
    return [f"launched: serve --api driver --gpu-time --py-stacks -- python "
            f"lines_workload.py ({result['steps']} steps, {a.seconds:g} s); serve exit "
            f"{serve.returncode}",
            *compare(result["lines"], result["ms"], last, "every call traced"),
            *[f"  serve: {t}" for t in said.splitlines() if "py-stacks" in t or "gpu-time" in t]]


def node(a: argparse.Namespace) -> list[str]:
    tag = f"/tmp/lines-{os.getpid()}"
    ready, log, err_path = f"{tag}.ready", f"{tag}.log", f"{tag}.err"
    # synchronised each step: its launches spread evenly in time, not in bursts of
    # 200 steps that a slice catches whole or not at all
    work_err = open(f"{tag}.work-err", "w+")
    work = subprocess.Popen([a.python, "scripts/gpu/lines_workload.py", "--seconds",
                             str(a.seconds + 40), "--log", log, "--ready", ready,
                             "--batch", "1"],
                            stdout=subprocess.PIPE, stderr=work_err, text=True,
                            env=dict(os.environ, PYTHONFAULTHANDLER="1",
                                     **({"LD_PRELOAD": os.environ["ABORT_BT"]}
                                        if os.environ.get("ABORT_BT") else {})))
    while not os.path.exists(ready):
        if work.poll() is not None:
            raise SystemExit("the workload ended before it was ready")
        time.sleep(0.1)
    time.sleep(3)
    err = open(err_path, "w")
    run = ["scripts/gpu/lines_align_debug.py"] if a.debug else ["-m", "cudaprobe"]
    serve = subprocess.Popen(
        [sys.executable, *run, "serve", "--prometheus", f"127.0.0.1:{PORT}",
         "--api", "driver", "--lib", a.lib, "--duty", a.duty, "--duty-period", a.duty_period,
         "--gpu-time", *([] if a.work_only else ["--py-stacks"])],
        stdout=subprocess.DEVNULL, stderr=err)
    wait_serving(err_path, serve)
    time.sleep(3)  # the library going in
    deadline = time.monotonic() + 60
    while (not a.work_only and "GPU timestamps moved" not in open(err_path).read()
           and time.monotonic() < deadline):
        time.sleep(0.2)  # the lines from once the process's clock is aligned (a start)
    began = time.monotonic()
    got0 = scrape()  # the counters then: what follows is compared, as rates, with
    time.sleep(a.seconds)  # the events of the same window (records come ~0.5 s late at
    ended = time.monotonic()  # both ends alike)
    got1 = scrape()
    got = {k: v if k.startswith(("[count]", "[relerr]")) else v - got0.get(k, 0)
           for k, v in got1.items()}
    serve.send_signal(signal.SIGINT)
    serve.wait(timeout=120)
    printed = work.communicate(timeout=120)[0]
    if work.returncode != 0 or not printed.strip():  # harmed: what it and the kernel said
        work_err.seek(0)
        dmesg = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
        logged = open(log).read().splitlines()
        last_t = json.loads(logged[-1])["t"] if logged else 0.0
        return [f"node: the workload ended with status {work.returncode} and printed "
                f"{len(printed)} characters; serve exit {serve.returncode}; its log last "
                f"at {last_t - ended:+.1f} s from serve's stop",

                *[f"  workload: {t}" for t in work_err.read().splitlines()[-25:]],
                *[f"  dmesg: {t}" for t in dmesg[-8:]],
                *[f"  serve: {t}" for t in open(err_path).read().splitlines()[-15:]]]
    result = json.loads(printed)
    entries = [json.loads(t) for t in open(log)]
    first = min((e for e in entries if e["t"] >= began), key=lambda e: e["t"])
    last = max((e for e in entries if e["t"] <= ended), key=lambda e: e["t"])
    # the events' window (log lines each second) against the scrapes': as rates
    per = (ended - began) / (last["t"] - first["t"])
    window = {n: (last["ms"][n] - first["ms"][n]) * per for n in result["ms"]}
    spins = (last["spin_ms"] - first["spin_ms"]) * per / 1e3
    said = open(err_path).read()
    out_dir = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out_dir, "serve-node.err"), "w") as f:  # whole: its warnings too
        f.write(said)
    with open(log) as src, open(os.path.join(out_dir, "workload-log.jsonl"), "w") as f:
        f.write(src.read())
    py_flag = "" if a.work_only else " --py-stacks"
    return [f"node: serve --api driver --duty {a.duty} --duty-period {a.duty_period} "
            f"--gpu-time{py_flag} beside the running workload, {a.seconds:g} s; events over "
            f"{last['t'] - first['t']:.1f} s of serve's window; workload exit {work.returncode}",
            *compare(result["lines"], window, got, "lines sampled: each kernel x 1/duty"),
            f"all kernels by name (all along, unscaled) {got.get('[all kernels]', 0):.4f} s, "
            f"the events' lines and "
            f"spins {sum(window.values()) / 1e3 + spins:.4f} s (ratio "
            f"{got.get('[all kernels]', 0) / (sum(window.values()) / 1e3 + spins):.3f})",
            f"slices in the window: {got.get('[slices]', 0):g}, "
            f"{(ended - began) / float(a.duty_period):.1f} periods",
            "serve's relative standard error (all its slices): "
            + ", ".join(f"{k[9:]} {v:.3f}" for k, v in sorted(got.items())
                        if k.startswith("[relerr]")),
            *[f"  serve: {t}" for t in said.splitlines()
              if "py-stacks" in t or "gpu-time" in t or "GPU" in t][:12]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["launched", "node"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lib", default="")
    ap.add_argument("--python", default="/opt/torch/.venv/bin/python")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--work-only", action="store_true",
                    help="node: serve without --py-stacks (kernels by name alone)")
    ap.add_argument("--duty", default="2%")
    ap.add_argument("--duty-period", default="5")
    ap.add_argument("--debug", action="store_true",
                    help="node: serve's clock alignment printed (lines_align_debug.py)")
    a = ap.parse_args()
    lines = launched(a) if a.mode == "launched" else node(a)
    with open(a.out, "a") as f:
        f.write("\n".join(lines) + "\n\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
