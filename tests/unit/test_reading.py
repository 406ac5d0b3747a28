"""DETAILS as the table shows it: what went in first, the argument a reader
looks for leading, what the call wrote after an arrow only where it wrote
it, the error said once; fitted to a width the result stays in sight. The
DETAILS texts are the ones real calls decode to (a trace of the demo, the
driver and NCCL workloads)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from cudaprobe.output.reading import ARROW, fit_reading, kernel_label, reading
from cudaprobe.output.stats_view import fitted_table
from cudaprobe.output.table import COLUMNS, PY_COLUMN, fit
from cudaprobe.output.text import cells

from .test_reporters import calls


def call(event: str, details: str):
    c = calls()[0]
    c.event, c.details = event, details
    return c


@pytest.mark.parametrize("event, details, shown", [
    ("cudaMalloc", "devPtr=0x7f6f52800000 size=4.0 MiB", "size=4.0 MiB → devPtr=0x7f6f52800000"),
    ("cudaMalloc", "devPtr=- size=4.0 MiB", "size=4.0 MiB"),  # not written: not shown
    ("cudaMemcpy", "dst=0x0 src=0x7f3de731f010 count=4.0 MiB kind=HostToDevice",
     "count=4.0 MiB kind=HostToDevice dst=0x0 src=0x7f3de731f010"),
    ("cudaLaunchKernel", "func=0x560f0d272c1e vecAdd(float const*, float const*, float*, int) "
     "gridDim=(4096,1,1) blockDim=(256,1,1) args=0x7ffc59a15ec0 sharedMem=0 B stream=0x0",
     "vecAdd(float const*, float const*, float*, int) gridDim=(4096,1,1) blockDim=(256,1,1) "
     "sharedMem=0 B stream=0x0 func=0x560f0d272c1e args=0x7ffc59a15ec0"),
    ("cudaLaunchKernel_ptsz", "func=0x401000 gridDim=(1,1,1) blockDim=(32,1,1) args=0x0 "
     "sharedMem=0 B stream=0x0",  # not named: its address says which kernel
     "func=0x401000 gridDim=(1,1,1) blockDim=(32,1,1) sharedMem=0 B stream=0x0 args=0x0"),
    ("cuLaunchKernelEx", "grid=(8,4,2) block=(128,1,1) smem=4.0 KiB stream=0xabc f=0x0 "
     "kernelParams=0x7ffc59c7ece0 extra=0x0",
     "f=0x0 grid=(8,4,2) block=(128,1,1) smem=4.0 KiB stream=0xabc kernelParams=0x7ffc59c7ece0 "
     "extra=0x0"),
    ("cuMemcpyDtoHAsync_v2", "dstHost=0x3000 srcDevice=0x4000 ByteCount=123 B hStream=0x5000",
     "ByteCount=123 B hStream=0x5000 dstHost=0x3000 srcDevice=0x4000"),
    ("cudaLaunchKernel", "func=0x1b8dbb60 (anonymous namespace)::softmax_warp_forward<…> "
     "gridDim=(64,1,1) blockDim=(128,1,1) args=0x7ffc59a15ec0 sharedMem=0 B stream=0x0",
     "(anonymous namespace)::softmax_warp_forward<…> gridDim=(64,1,1) blockDim=(128,1,1) "
     "sharedMem=0 B stream=0x0 func=0x1b8dbb60 args=0x7ffc59a15ec0"),
    ("cuLaunchKernel", "f=0x7f00 (name unknown: not made by a traced call, and not readable "
     "from the handle) gridDim=(4,1,1) blockDim=(32,1,1) sharedMemBytes=0 B hStream=0x0 "
     "kernelParams=0x1 extra=0x0",
     "f=0x7f00 (name unknown: not made by a traced call, and not readable from the handle) "
     "gridDim=(4,1,1) blockDim=(32,1,1) sharedMemBytes=0 B hStream=0x0 kernelParams=0x1 "
     "extra=0x0"),
    ("cuDeviceGet", "device=- ordinal=0", "ordinal=0"),
    ("cuDriverGetVersion", "driverVersion=12020", "driverVersion=12020"),
    ("cudaEventRecord", "event=0x0 stream=0x0", "event=0x0 stream=0x0"),
    ("ncclAllReduce", "sendbuff=0x7f0000001000 recvbuff=0x7f0000101000 count=262144 "
     "datatype=ncclFloat32 bytes=1.0 MiB op=ncclSum comm=0x55abdbcc90e0 (rank 0 of 2) "
     "stream=0x5000",
     "bytes=1.0 MiB count=262144 datatype=ncclFloat32 op=ncclSum comm=0x55abdbcc90e0 "
     "(rank 0 of 2) stream=0x5000 sendbuff=0x7f0000001000 recvbuff=0x7f0000101000"),
    ("cudaGetLastError", "", ""),
])
def test_inputs_first_the_one_a_reader_wants_leading_outputs_after_an_arrow(event, details,
                                                                               shown):
    assert reading(call(event, details)) == shown


def test_the_error_goes_where_the_outputs_would_and_a_call_in_flight_says_so():
    malloc = call("cudaMalloc", "devPtr=- size=4.0 MiB")
    assert reading(malloc, "InsufficientDriver") == "size=4.0 MiB → InsufficientDriver"
    running = call("cudaStreamSynchronize", "stream=0x0 (still running when the trace ended)")
    assert reading(running, "in flight") == "stream=0x0 → in flight"
    assert reading(running) == "stream=0x0"  # RESULT says `in flight`
    assert reading(call("cudaGetLastError", ""), "NoDevice") == "NoDevice"


def test_a_name_the_traced_program_chose_only_moves_words_within_its_own_row():
    """A kernel named to look like arguments (`k size=1 MiB`) cannot make the
    row lose or invent a word: the same words, some in another order."""
    hostile = "func=0x401000 k size=1 MiB devPtr=0x1 gridDim=(1,1,1) blockDim=(32,1,1) " \
              "args=0x0 sharedMem=0 B stream=0x0"
    shown = reading(call("cudaLaunchKernel", hostile))
    assert sorted(shown.split()) == sorted(hostile.replace("func=0x401000 ", "").split()
                                           + ["func=0x401000"])


def test_a_kernel_name_gives_its_parameters_then_templates_then_namespaces():
    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul>)")
    assert kernel_label("vecAdd(float*, int)", 24) == "vecAdd(float*, int)"
    assert kernel_label("vecAdd(float const*, float const*, float*, int)", 24) == "vecAdd"
    assert kernel_label(name, 48) == "at::native::vectorized_elementwise_kernel<…>"
    assert kernel_label(name, 30) == "vectorized_elementwise_kernel<…>"


@pytest.mark.parametrize("width", [16, 24, 33, 60, 90])
def test_fitted_the_result_stays_and_what_went_in_keeps_its_first_argument(width):
    memcpy = call("cudaMemcpy", "dst=0x0 src=0x7f3de731f010 count=4.0 MiB kind=HostToDevice")
    text = reading(memcpy, "InsufficientDriver")
    shown = fit_reading(text, "InsufficientDriver", " <1.2µs>", width)
    assert cells(shown) <= width
    assert shown.startswith("count=4.0 MiB")  # whole, not `count=4.0…`
    assert (ARROW + "Insuf" in shown) == (width > 16)  # (16 cells hold one of them)
    assert shown.endswith(" <1.2µs>") == (width >= 90)  # the folded latency: whole or not at all


def test_with_the_python_column_at_80_the_process_name_folds_for_details():
    shown, widths, folded = fit(80, (*COLUMNS, PY_COLUMN))
    assert folded == ("TID", "RESULT", "LATENCY", "PROCESS")
    assert 80 - sum(widths) - len(widths) >= 24
    shown, widths, folded = fit(80)  # without it, PROCESS stays
    assert "PROCESS" not in folded and 80 - sum(widths) - len(widths) >= 33


def stats_lines(width: int) -> list[str]:
    names = ["cudaStreamSynchronize", "cuMemcpyDtoHAsync_v2", "cudaMalloc"]
    rows = [[n, "12", "1.2ms", "100µs", "1µs", "2ms", "90µs", "1.1ms", "1.9ms",
             "cudaErrorInsufficientDriver x3, cudaErrorMemoryAllocation x1"] for n in names]
    columns = ("EVENT", "CALLS", "TOTAL", "AVG", "MIN", "MAX", "P50", "P95", "P99", "ERRORS")
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=True, no_color=True)
    console.print(fitted_table("stats", columns, rows, width, ("EVENT", "ERRORS")))
    return Text.from_ansi(buf.getvalue()).plain.splitlines()


@pytest.mark.parametrize("width", [80, 100, 160, 200])
def test_stats_names_are_never_cut_where_there_is_room_and_rows_never_wrap(width):
    lines = stats_lines(width)
    assert all(cells(line) <= width for line in lines)
    body = [line for line in lines if "│" in line]
    assert len(body) == 3  # one line a row
    assert [line.split()[0] for line in body] == ["cudaStreamSynchronize",
                                                  "cuMemcpyDtoHAsync_v2", "cudaMalloc"]
    header = next(line for line in lines if "EVENT" in line)
    assert ("P95" in header) == ("left out" not in lines[-1])  # a column left out is said
    whole = "cudaErrorInsufficientDriver x3, cudaErrorMemoryAllocation x1"
    if width >= 200:
        assert whole in body[0] and "left out" not in "".join(lines)
    elif whole not in body[0]:  # cut: the errors less their prefix
        assert "Insufficient" in body[0] and "cudaError" not in body[0]
        assert body[0].rstrip().endswith("…")
    if width == 80:
        assert "P95" not in header and "P95" in lines[-1] and "left out" in lines[-1]
