"""deploy/prometheus's alert rules through promtool (check, and a test case
for each rule), and the files scripts/gen-fleet makes: the committed ones
are what it makes now."""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess

import pytest

from ..conftest import HANG_S, REPO

yaml = pytest.importorskip("yaml")

RULES = REPO / "deploy" / "prometheus"
ALERTS = RULES / "cudaprobe-alerts.yaml"
ALERT_TESTS = RULES / "cudaprobe-alerts.test.yaml"


def promtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("no promtool (Debian's prometheus package): run scripts/setup")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=HANG_S, cwd=RULES)


def alert_names() -> list[str]:
    return [r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def test_promtool_checks_the_rules():
    p = promtool("check", "rules", ALERTS.name)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in p.stdout


def test_promtool_test_cases_pass():
    p = promtool("test", "rules", ALERT_TESTS.name)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


def test_each_rule_fires_in_a_case_and_is_quiet_in_another():
    cases = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired, quiet = set(), set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fired == quiet == set(alert_names())
    assert {"CudaErrorsRising", "CudaOutOfMemory", "CudaprobeLosesEvents",
            "CudaMemoryOnlyGrows", "CudaGpuTimeCollapsed"} <= fired


def test_promtool_test_fails_on_a_wrong_expectation(tmp_path):
    """The cases are checked, not only run: one wrong expected label fails."""
    shutil.copy(ALERTS, tmp_path / ALERTS.name)
    text = ALERT_TESTS.read_text().replace("process: leaky", "process: cache", 1)
    (tmp_path / ALERT_TESTS.name).write_text(text)
    exe = shutil.which("promtool") or pytest.skip("no promtool")
    p = subprocess.run([exe, "test", "rules", ALERT_TESTS.name], capture_output=True, text=True,
                       timeout=HANG_S, cwd=tmp_path)
    assert p.returncode != 0 and "CudaMemoryOnlyGrows" in p.stdout + p.stderr


def load_generator() -> dict:
    """scripts/gen-fleet's globals (it has no .py suffix to import it by)."""
    pytest.importorskip("grafana_foundation_sdk")
    return runpy.run_path(str(REPO / "scripts" / "gen-fleet"))


def test_generated_files_are_up_to_date():
    for path, text in load_generator()["outputs"]().items():
        assert path.read_text() == text, f"run scripts/gen-fleet: {path.relative_to(REPO)}"


def test_prometheus_rule_holds_the_alerts_file_groups():
    rule = yaml.safe_load((REPO / "deploy" / "kubernetes" / "components" / "prometheus-operator"
                          / "prometheusrule.yaml").read_text())
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]


def test_dashboard_panels_query_with_the_variables():
    board = json.loads((REPO / "deploy" / "grafana" / "cudaprobe-dashboard.json").read_text())
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "node", "namespace", "process", "function"]
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) == 12
    for p in panels:
        (target,) = p["targets"]
        assert p["datasource"] == target["datasource"] == {"type": "prometheus",
                                                           "uid": "${datasource}"}
        assert 'node=~"$node"' in target["expr"], p["title"]
