"""Backward calls on their forward line (--py-stacks, PyTorch), with the real
libtorch (the CPU build scripts/setup puts in .deps/torch) and the real
libcudart: autograd_workload.py's custom Function makes a cudaMalloc in each
backward, for nodes made on three forward lines, and prints what PyTorch
itself says of each (the node's sequence number from ctx._sequence_nr(),
and the line its forward op ran on). Every call's row must carry that node
and that line, launched and attached with --pid; a backward that raises
goes through the probes to the program's own `except`, and the program
ends as it would untraced. A library named libtorch that is not PyTorch's is
said once, and its process's stacks are as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, build_workload, cudaprobe_cmd
from .running import Lines, started

pytestmark = pytest.mark.slow

WORKLOAD = Path(__file__).resolve().parent / "autograd_workload.py"
TORCH = REPO / ".deps" / "torch"
STEPS = 4
PROBED = "PyTorch's autograd probed"


@pytest.fixture(scope="module")
def torch_env() -> dict[str, str]:
    assert (TORCH / "torch" / "__init__.py").exists(), \
        f"no PyTorch in {TORCH}: run scripts/setup"
    return {**os.environ, "PYTHONPATH": str(TORCH)}


def workload(torch_env, libcudart, go: Path) -> subprocess.Popen:
    return started(subprocess.Popen(
        [sys.executable, str(WORKLOAD), str(libcudart), str(STEPS), str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=torch_env))


def check_rows(rows: list[dict], printed: list[dict], pid: int) -> None:
    """Each backward cudaMalloc (by its size): the node PyTorch numbered, and the
    forward op's stack, whose frame in the workload is the line it printed."""
    said = {p["size"]: p for p in printed if "size" in p}
    assert len(said) == 3 * STEPS + 1  # three nodes a step, and the one that raised
    calls = {r["args"]["size"]: r for r in rows if r["event"] == "cudaMalloc"}
    assert set(calls) == set(said)
    for size, row in calls.items():
        truth = said[size]
        assert row["pid"] == pid and row["tid"] == truth["tid"]
        assert row["autograd_node"] == truth["node"], row
        ours = [[f["file"], f["line"], f["function"].rsplit(".", 1)[-1]]
                for f in row["py_stack_forward"] if f["file"] == str(WORKLOAD)]
        assert ours[0] == truth["forward"], row
        # the call's own stack: the Function's backward, under the step's backward()
        assert row["py_stack"][0]["function"].endswith("backward"), row


def read_printed(proc: subprocess.Popen) -> list[dict]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert printed[-1] == {"done": 3 * STEPS + 1, "caught": "a backward that raises"}
    return printed


def test_launched_every_backward_call_has_its_forward_line(tmp_path, libcudart, torch_env):
    go, out = tmp_path / "go", tmp_path / "calls.jsonl"
    tracer = started(subprocess.Popen(
        cudaprobe_cmd("trace", "--py-stacks", "-e", "cudaMalloc", "--lib", str(libcudart),
                      "-o", str(out), "--", sys.executable, str(WORKLOAD), str(libcudart),
                      str(STEPS), str(go)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=torch_env))
    said, printed = Lines(tracer.stderr), Lines(tracer.stdout)
    ready = json.loads(printed.wait_for(lambda line: '"ready"' in line, "the workload"))
    said.wait_for(lambda line: PROBED in line and f"pid {ready['ready']}" in line,
                  "the autograd probes")  # in before the first forward op
    go.touch()
    assert tracer.wait(timeout=120) == 0, said.until_end()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows, summary = lines[:-1], lines[-1]["summary"]
    assert summary["lost_total"] == 0
    stdout = [json.loads(line) for line in printed.until_end().splitlines()]
    assert stdout[-1] == {"done": 3 * STEPS + 1, "caught": "a backward that raises"}
    check_rows(rows, stdout, ready["ready"])
    assert f"{3 * STEPS + 1} calls of PyTorch's backward pass carry" in said.until_end()


def test_attached_every_backward_call_has_its_forward_line(tmp_path, libcudart, torch_env):
    go, out = tmp_path / "go", tmp_path / "calls.jsonl"
    proc = workload(torch_env, libcudart, go)
    printed = Lines(proc.stdout)
    pid = json.loads(printed.wait_for(lambda line: '"ready"' in line, "the workload"))["ready"]
    tracer = started(subprocess.Popen(
        cudaprobe_cmd("trace", "--pid", str(pid), "--py-stacks", "-e", "cudaMalloc",
                      "--lib", str(libcudart), "-o", str(out)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    said = Lines(tracer.stderr)
    said.wait_for(lambda line: PROBED in line, "the autograd probes")
    said.wait_for(lambda line: f"attached to pid {pid}" in line, "the trace's start")
    go.touch()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert tracer.wait(timeout=120) == 0, said.until_end()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    stdout = [json.loads(line) for line in printed.until_end().splitlines()]
    assert stdout[-1] == {"done": 3 * STEPS + 1, "caught": "a backward that raises"}
    check_rows(lines[:-1], stdout, pid)


def test_untraced_the_workload_prints_the_same(tmp_path, libcudart, torch_env):
    """The oracle's own run: the same nodes and lines without cudaprobe (what the
    traced runs printed is what PyTorch says, not an effect of the probes)."""
    go = tmp_path / "go"
    go.touch()
    printed = read_printed(workload(torch_env, libcudart, go))
    assert [p["forward"][1] for p in printed if "size" in p][:3] == \
        [line_of("z = Double.apply"), line_of("return Double.apply(h"),
         line_of("h = Double.apply")]


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(WORKLOAD.read_text().splitlines(), 1)
                if text in line)


OTHER = """
import ctypes, json, os, sys, time
ctypes.CDLL(sys.argv[1])  # a libtorch_cpu.so that is not PyTorch's
cudart = ctypes.CDLL(sys.argv[2])
print(json.dumps({"ready": os.getpid()}), flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
cudart.cudaMalloc(ctypes.byref(ctypes.c_void_p()), ctypes.c_size_t(4096))
"""


def test_a_libtorch_without_the_autograd_functions_is_said_once_and_stacks_stay(
        tmp_path, libcudart):
    fake = build_workload("not_libtorch.c", "not_torch/libtorch_cpu.so",
                          extra=["-shared", "-fPIC"])
    script, go, out = tmp_path / "other.py", tmp_path / "go", tmp_path / "calls.jsonl"
    script.write_text(OTHER)
    tracer = started(subprocess.Popen(
        cudaprobe_cmd("trace", "--py-stacks", "-e", "cudaMalloc", "--lib", str(libcudart),
                      "-o", str(out), "--", sys.executable, str(script), str(fake),
                      str(libcudart), str(go)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    said, printed = Lines(tracer.stderr), Lines(tracer.stdout)
    printed.wait_for(lambda line: '"ready"' in line, "the workload")
    line = said.wait_for(lambda line: "libtorch_cpu.so" in line, "the line about libtorch")
    assert line.endswith("libtorch_cpu.so: it does not define the autograd functions "
                         "cudaprobe probes: backward calls are not given their forward line")
    go.touch()
    assert tracer.wait(timeout=120) == 0, said.until_end()
    assert said.until_end().count("not given their forward line") == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()][:-1]
    assert [r["event"] for r in rows] == ["cudaMalloc"]
    assert rows[0]["py_stack"][0]["file"] == str(script) and "autograd_node" not in rows[0]
