"""The fleet dashboard's panels and the alert rules, as a real Prometheus
answers them from the scrapes check-dashboard.sh kept on a GPU node.

The scrapes (OpenMetrics, each with its time) are grouped into one
OpenMetrics file with timestamps, a `node` label added to every series as
the DaemonSet's scrape config adds it, and an `up` series; `promtool tsdb
create-blocks-from openmetrics` makes them a TSDB; Prometheus is started on
it, and every panel's query is sent as Grafana would send it with that node
chosen (at the last scrape's time), every variable's series listed, and
every alert's expression evaluated. Prints each panel's series; exits 1
where a panel or variable has no data.

    python3 scripts/gpu/dashboard_replay.py SCRAPES.gz [--node gpu-node] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "cudaprobe-dashboard.json"
ALERTS = REPO / "deploy" / "prometheus" / "cudaprobe-alerts.yaml"
SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_info", "_gsum", "_gcount", "")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def scrapes(path: str) -> list[tuple[float, list[str]]]:
    out: list[tuple[float, list[str]]] = []
    with gzip.open(path, "rt") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# scrape "):
                out.append((float(line.split()[2]), []))
            elif out and line and line != "# EOF":
                out[-1][1].append(line)
    return out


def openmetrics(taken: list[tuple[float, list[str]]], node: str) -> str:
    """One OpenMetrics text of every scrape: each family once, each series'
    points in time order, `node` added; `up` 1 at each scrape."""
    meta: dict[str, list[str]] = {}
    # family -> series (labels but le) -> [(time, line)]
    points: dict[str, dict[str, list[tuple[float, str]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for ts, lines in taken:
        families: set[str] = set()
        for line in lines:
            if line.startswith("#"):
                parts = line.split(" ", 3)
                families.add(parts[2])
                if parts[2] not in meta or line not in meta[parts[2]]:
                    meta.setdefault(parts[2], []).append(line)
                continue
            m = SAMPLE.match(line)
            if m is None:
                raise SystemExit(f"not a sample: {line!r}")
            name, labels, value = m.groups()
            family = next(name[:len(name) - len(s)] for s in SUFFIXES
                          if name.endswith(s) and name[:len(name) - len(s)] in families)
            inner = labels[1:-1] if labels else ""
            inner = f'node="{node}"' + ("," + inner if inner else "")
            series = re.sub(r',?le="[^"]*"', "", inner)
            points[family][series].append((ts, f"{name}{{{inner}}} {value} {ts:.3f}"))
    out = ["# TYPE up gauge"]
    out += [f'up{{job="cudaprobe",node="{node}"}} 1 {ts:.3f}' for ts, _ in taken]
    for family, series in points.items():
        out += meta.get(family, [])
        for lines in series.values():
            out += [line for _, line in sorted(lines, key=lambda p: p[0])]
    return "\n".join(out + ["# EOF"]) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, tsdb: Path, work: Path) -> None:
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(work / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
             "--storage.tsdb.retention.time=100y", f"--web.listen-address={self.url[7:]}"],
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                log = (work / "prometheus.log").read_text()
                raise SystemExit(f"prometheus did not start: {log}")
            time.sleep(0.3)

    def get(self, path: str, **params: str) -> object:
        url = f"{self.url}{path}?" + urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
        if body["status"] != "success":
            raise SystemExit(f"{path} {params}: {body}")
        return body["data"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scrapes")
    ap.add_argument("--node", default="gpu-node")
    ap.add_argument("--out")
    a = ap.parse_args()
    taken = scrapes(a.scrapes)
    if len(taken) < 3:
        raise SystemExit(f"{len(taken)} scrapes: too few to read rates from")
    first, last = taken[0][0], taken[-1][0]
    lines = [f"{len(taken)} scrapes over {last - first:.0f} s, node={a.node}"]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "in.om").write_text(openmetrics(taken, a.node))
        made = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                               str(work / "in.om"), str(work / "tsdb")],
                              capture_output=True, text=True)
        if made.returncode:
            raise SystemExit(f"promtool: {made.stdout}{made.stderr}")
        prom = Prometheus(work / "tsdb", work)
        try:
            chosen = {"$node": a.node, "$namespace": ".*", "$process": ".*", "$function": ".*",
                      "$__rate_interval": "30s", "$__range": f"{int(last - first) + 10}s"}

            def sent(expr: str) -> str:
                for k, v in chosen.items():
                    expr = expr.replace(k, v)
                return expr
            board = json.loads(DASHBOARD.read_text())
            for v in board["templating"]["list"]:
                if v["type"] != "query":
                    continue
                m = re.fullmatch(r"label_values\((.*), (\w+)\)", sent(v["query"]["query"]))
                series = prom.get("/api/v1/series", **{"match[]": m.group(1)},
                                  start=str(first), end=str(last))
                values = sorted({s[m.group(2)] for s in series if m.group(2) in s})
                ok &= bool(values)
                lines.append(f"variable {v['name']}: {values or 'NO DATA'}")
            for p in board["panels"]:
                if p["type"] == "row":
                    continue
                expr = sent(p["targets"][0]["expr"])
                result = prom.get("/api/v1/query", query=expr, time=str(last))["result"]
                ok &= bool(result)
                lines.append(f"panel {p['title']}: {len(result)} series" +
                             ("" if result else f"  NO DATA: {expr}"))
                for s in sorted(result, key=lambda s: -float(s["value"][1]))[:8]:
                    labels = {k: v for k, v in s["metric"].items() if k != "__name__"}
                    lines.append(f"    {float(s['value'][1]):.6g}  {labels}")
            for group in yaml.safe_load(ALERTS.read_text())["groups"]:
                for rule in group["rules"]:
                    if "alert" not in rule:
                        continue
                    result = prom.get("/api/v1/query", query=rule["expr"], time=str(last))
                    lines.append(f"alert {rule['alert']}: {len(result['result'])} firing "
                                 f"(expression evaluated at the last scrape)")
        finally:
            prom.stop()
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
