"""`cudaprobe trace -e all` sees every call that benchmarks/api_tour.cu makes:
graphs and capture, stream-ordered pools, virtual memory, host registration,
callbacks, profiler ranges, symbol and 3D copies, stream priorities, through
the real libcudart and Debian's real libcuda (535, no GPU: every call fails,
but each is made, on the real code, with real arguments).

The tour prints `CALL <api> <function> <code>` per call. Runtime calls must be
traced as many times as made, each with the code it returned; driver calls at
least as many times (libcudart makes driver calls of its own: 440 of
cuGetProcAddress). scripts/gpu/check-catalogue.sh runs the same comparison
on the GPU machine, with CUPTI's count as a third.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from cudaprobe.catalogue.functions import BY_SYMBOL

from ..conftest import NVCC
from .conftest import trace_jsonl

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def tour(libcuda: Path, tmp_path_factory) -> Path:
    if not NVCC.exists():
        pytest.skip(f"nvcc not found at {NVCC}")
    out = tmp_path_factory.mktemp("tour") / "api_tour"
    # the shared runtime, so that its calls go through libcudart's symbols
    subprocess.run([str(NVCC), "-cudart=shared", "-o", str(out),
                    str(REPO / "benchmarks" / "api_tour.cu"), "-Xlinker", str(libcuda)],
                   check=True, capture_output=True, text=True)
    return out


def header_name(event: str) -> str:
    for variant in ("_ptsz", "_ptds"):
        event = event.removesuffix(variant)
    return BY_SYMBOL[event].name


@pytest.fixture(scope="module")
def traced_tour(tour, libcudart, libcuda, tmp_path_factory):
    """The tour traced whole (-e all), once, for the tests below to read."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(libcuda.parent)}
    return trace_jsonl(tmp_path_factory.mktemp("traced_tour"), "-e", "all",
                       "--lib", str(libcudart), "--lib", str(libcuda),
                       command=[str(tour)], env=env)


def test_every_call_made_is_traced_with_its_code(traced_tour):
    calls, summary, proc = traced_tour
    made: Counter = Counter()
    codes: dict[tuple[str, str], set[int]] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CALL "):
            _, api, name, code = line.split()
            made[(api, name)] += 1
            codes.setdefault((api, name), set()).add(int(code))
    seen = Counter((c["api"], header_name(c["event"])) for c in calls)
    assert len(made) >= 60 and summary["lost_total"] == 0
    for (api, name), n in made.items():
        if api == "runtime":
            assert seen[(api, name)] == n, name
        else:
            assert seen[(api, name)] >= n, name
    # the return codes are the ones the tour got (its <<<>>> launch prints -1)
    for c in calls:
        key = (c["api"], header_name(c["event"]))
        if key in codes and -1 not in codes[key]:
            assert c["ret"] in codes[key], (key, c["ret"])
    assert seen[("driver", "cuGetProcAddress")] > 100  # libcudart's own lookups


def test_structs_enums_and_out_parameters_decode(traced_tour):
    calls, _, _ = traced_tour
    first = {}
    for c in calls:
        first.setdefault(c["event"], c)
    create = first["cuMemCreate"]["args"]
    assert create["size"] == 2 << 20 and create["handle"] is None  # failed: not read
    assert create["prop"]["type"] == "CU_MEM_ALLOCATION_TYPE_PINNED"
    assert create["prop"]["location.type"] == "CU_MEM_LOCATION_TYPE_DEVICE"
    access = first["cuMemSetAccess"]["args"]
    assert access["desc"]["flags"] == "CU_MEM_ACCESS_FLAGS_PROT_READWRITE"
    assert access["count"] == 1
    copy = first["cudaMemcpy3D"]["args"]["p"]
    assert (copy["extent.width"], copy["extent.height"], copy["extent.depth"]) == (256, 8, 4)
    assert copy["kind"] == "cudaMemcpyDeviceToDevice"
    props = first["cudaMemPoolCreate"]["args"]["poolProps"]
    assert props["allocType"] == "cudaMemAllocationTypePinned" and props["location.id"] == 0
    assert first["cudaStreamBeginCapture"]["args"]["mode"] == "cudaStreamCaptureModeGlobal"
    lookups = [c["args"]["symbol"] for c in calls if c["event"] == "cuGetProcAddress_v2"]
    assert "cuMemAlloc" in lookups  # the tour's own, its string read at entry
