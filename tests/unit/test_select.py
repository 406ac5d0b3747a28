"""-e/--events: the default set, `all`, categories, names, globs and `!`."""

from __future__ import annotations

import pytest

from cudaprobe.catalogue.categories import CURATED
from cudaprobe.catalogue.functions import DRIVER, FUNCTIONS, HOT, RUNTIME
from cudaprobe.errors import UnknownEvent
from cudaprobe.probe.plan import select_functions


def names(functions) -> list[str]:
    return [f.name for f in functions]


def test_the_default_is_the_curated_set_and_the_calls_that_say_something():
    default = names(select_functions(None))
    assert "cudaGetDevice" not in default and "cuCtxGetCurrent" not in default
    assert "cudaMalloc" in default and "cuLaunchKernel" in default
    assert not set(default) & HOT
    assert CURATED - HOT <= set(default)  # the hand-written catalogue's default, whole
    # new: graphs, capture, VMM, pools, callbacks, profiler; not getters
    assert {"cudaGraphCreate", "cudaStreamBeginCapture", "cuMemCreate", "cuMemMap",
            "cudaMallocFromPoolAsync", "cudaLaunchHostFunc", "cudaProfilerStart"} <= set(default)
    assert not {"cudaStreamGetCaptureInfo", "cudaFuncGetAttributes", "cuGetProcAddress",
                "cudaDeviceGetAttribute", "cuPointerGetAttribute"} & set(default)
    assert select_functions([]) == select_functions(None)


def test_all_adds_the_hot_getters():
    assert select_functions(["all"]) == list(FUNCTIONS)
    assert names(select_functions(["all"], {RUNTIME})) == [f.name for f in FUNCTIONS
                                                           if f.api == RUNTIME]


def test_a_category_or_a_name_selects_hot_getters_too():
    assert "cudaGetDevice" in names(select_functions(["device"]))
    assert names(select_functions(["cudaGetDevice"])) == ["cudaGetDevice"]


def test_globs_match_names_and_variant_symbols():
    copies = names(select_functions(["cudaMemcpy*"]))
    assert {"cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync",
            "cudaMemcpyPeer", "cudaMemcpyPeerAsync", "cudaMemcpy3D",
            "cudaMemcpyToSymbol"} <= set(copies)
    assert all(n.startswith("cudaMemcpy") for n in copies)
    assert names(select_functions(["*_ptsz"])) == names(
        f for f in FUNCTIONS if "_ptsz" in f.variants)
    assert names(select_functions(["cuMemAlloc_v?"], {DRIVER})) == ["cuMemAlloc"]


def test_bang_takes_out_what_was_selected():
    memory = names(select_functions(["memory"]))
    assert names(select_functions(["memory,!cudaFree"])) == [n for n in memory if n != "cudaFree"]
    assert names(select_functions(["memory", "!cudaMalloc*,!cudaFree*"])) == [
        n for n in memory if not n.startswith(("cudaMalloc", "cudaFree"))]


def test_only_exclusions_start_from_the_default_set():
    chosen = names(select_functions(["!cudaEventQuery"]))
    assert chosen == [n for n in names(select_functions(None)) if n != "cudaEventQuery"]
    assert "cudaGetDevice" not in chosen


def test_all_then_exclusions():
    assert names(select_functions(["all,!kernel"])) == [f.name for f in FUNCTIONS
                                                        if f.category != "kernel"]


@pytest.mark.parametrize("item", ["cudaFoo", "cudaFoo*", "!cudaFoo", "memroy"])
def test_an_item_that_names_nothing_is_an_error(item):
    with pytest.raises(UnknownEvent) as e:
        select_functions([item])
    assert repr(item.lstrip("!")) in str(e.value)


def test_globs_ignore_case_and_list_searches_words():
    assert "cudaMalloc" in names(select_functions(["*MALLOC*"]))
    found = names(select_functions(["malloc"], search=True))
    assert {"cudaMalloc", "cudaMallocHost", "cudaMallocManaged"} <= set(found)
    assert all("malloc" in n.lower() for n in found)
    with pytest.raises(UnknownEvent):  # trace, stats, serve: a name is a name
        select_functions(["malloc"])
