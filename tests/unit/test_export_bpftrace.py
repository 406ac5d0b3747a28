"""The bpftrace exporter's text, without root: golden files, and the invariants
a script must keep (pairing, clean-up, column widths, quoting).

The golden files under tests/unit/golden/ are made from fixed symbol tables,
not from the libraries on this machine. After a deliberate change, remake
them with:  UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_export_bpftrace.py
and read the diff.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudaprobe.catalogue.functions import FUNCTIONS, Arg, ArgKind
from cudaprobe.errors import UsageError
from cudaprobe.output.bpftrace import (
    _HEADER,
    COLUMNS,
    ExportOptions,
    _fill,
    quote_probe_path,
    render_script,
)
from cudaprobe.output.bpftrace_fields import arg_field
from cudaprobe.probe import plan as probes_module
from cudaprobe.probe.plan import plan_probes, select_functions

from ..conftest import HANG_S, as_not_root, cudaprobe_cmd, libcudart_path

GOLDEN = Path(__file__).parent / "golden"
CUDART = "/opt/cuda 13/lib64/libcudart.so.13"
CUDART_COPY = '/home/ann/my "envs"/nvidia/cuda_runtime/lib/libcudart.so.13'
LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"

RUNTIME_EVENTS = [
    "cudaMalloc", "cudaHostAlloc", "cudaMallocPitch", "cudaMemGetInfo", "cudaMemcpy",
    "cudaMemcpyAsync", "cudaMemset", "cudaLaunchKernel", "cudaLaunchKernelExC",
    "cudaGraphLaunch", "cudaStreamCreate", "cudaEventElapsedTime", "cudaGetDeviceCount",
    "cudaDeviceSynchronize",
]
DRIVER_EVENTS = ["cuMemAlloc", "cuMemsetD8", "cuMemsetD16", "cuModuleGetFunction",
                 "cuLaunchKernel", "cuLaunchKernelEx", "cuCtxSynchronize"]
# what the fake libraries export: some optional variants are missing, and the
# copy of libcudart defines fewer functions than the toolkit's
EXPORTED = {
    CUDART: {"cudaMalloc", "cudaHostAlloc", "cudaMallocPitch", "cudaMemGetInfo", "cudaMemcpy",
             "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemset", "cudaLaunchKernel",
             "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaGraphLaunch",
             "cudaStreamCreate", "cudaEventElapsedTime", "cudaGetDeviceCount",
             "cudaDeviceSynchronize"},
    CUDART_COPY: {"cudaMalloc", "cudaMemcpy", "cudaLaunchKernel"},
    LIBCUDA: {"cuMemAlloc_v2", "cuMemsetD8_v2", "cuMemsetD16_v2", "cuModuleGetFunction",
              "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuCtxSynchronize"},
}


@pytest.fixture
def fake_libraries(monkeypatch):
    """plan_probes reads these symbol tables instead of ELF files."""
    def read_symbols(path):
        path = getattr(path, "name", path)
        names = sorted(EXPORTED[path])
        offsets = {n: 0x1000 * (i + 1) for i, n in enumerate(names)}
        return SimpleNamespace(path=path, is_pie_or_shared=True, functions=offsets,
                               vaddrs=offsets, by_address=(), loads=())
    monkeypatch.setattr(probes_module, "read_symbols", read_symbols)
    monkeypatch.setattr(probes_module, "as_file", named_only)


def named_only(path):
    """A library as plan_probes opens it, for paths that name no file here."""
    return SimpleNamespace(name=path, identity=path, proc_path=path)


def export(events, libraries, apis=("runtime", "driver"), **options) -> str:
    plan = plan_probes(select_functions(events, set(apis)), libraries)
    return render_script(plan, ExportOptions(command="cudaprobe export bpftrace (test)", **options),
                         "cuda_events.bt")


CASES = {
    "runtime_lines.bt": lambda: export(RUNTIME_EVENTS, [CUDART, CUDART_COPY]),
    "driver_lines_pid.bt": lambda: export(DRIVER_EVENTS, [LIBCUDA], pids=(4242,)),
    "runtime_summary.bt": lambda: export(["transfer", "cudaMalloc", "cudaDeviceSynchronize"],
                                         [CUDART], summary=True, pids=(17, 4242)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name, fake_libraries):
    text = CASES[name]()
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{name} changed: if that was meant, run with UPDATE_GOLDEN=1 and review the diff")


def blocks(script: str) -> dict[str, list[str]]:
    """"uprobe SYMBOL" / "uretprobe SYMBOL" -> the probe's body lines."""
    found = {}
    for block in script.split("\n\n"):
        lines = [line for line in block.split("\n") if not line.startswith("//")]
        if lines[0].startswith(("uprobe:", "uretprobe:")):
            kind, symbol = lines[0].split(":", 1)[0], lines[0].rstrip(",").rsplit(":", 1)[1]
            found[f"{kind} {symbol}"] = lines[lines.index("{") + 1:lines.index("}")]
    return found


def test_optional_symbols_a_library_lacks_are_left_out(fake_libraries):
    script = export(RUNTIME_EVENTS, [CUDART, CUDART_COPY])
    assert "cudaMemcpy_ptds" in script and "cudaLaunchKernel_ptsz" in script
    assert "cudaMemcpyAsync_ptsz" not in script and "cudaMemset_ptds" not in script
    # a symbol both libraries define is one probe with both attach points
    assert ('uprobe:"/opt/cuda 13/lib64/libcudart.so.13":cudaMalloc,\n'
            'uprobe:"/home/ann/my \\"envs\\"/nvidia/cuda_runtime/lib/libcudart.so.13":cudaMalloc\n'
            in script)


def test_pairing_is_per_thread_and_deleted_after_use(fake_libraries):
    script = export(RUNTIME_EVENTS + DRIVER_EVENTS, [CUDART, LIBCUDA])
    found = blocks(script)
    entries = {k.split()[1]: v for k, v in found.items() if k.startswith("uprobe ")}
    returns = {k.split()[1]: v for k, v in found.items() if k.startswith("uretprobe ")}
    assert entries.keys() == returns.keys() == EXPORTED[CUDART] | EXPORTED[LIBCUDA]
    ids = set()
    for symbol, body in entries.items():
        n = re.match(r"\t@start\[tid, (\d+)\] = elapsed;", body[0]).group(1)
        ids.add(n)
        saved = {m for line in body for m in re.findall(r"(@\w+)\[tid, " + n + r"\] =", line)}
        ret = "\n".join(returns[symbol])
        for m in saved:  # everything saved at entry is read and deleted at return
            assert f"{m}[tid, {n}]" in ret.split("delete")[0], (symbol, m)
            assert f"delete({m}[tid, {n}]);" in ret, (symbol, m)
        assert returns[symbol][-1] == f"\tdelete(@start[tid, {n}]);"
    assert len(ids) == len(entries)  # one probe id per symbol


def test_return_probes_only_pair_what_entered(fake_libraries):
    script = export(["cudaMalloc"], [CUDART], pids=(4242,))
    assert re.search(r'uprobe:"[^\n]*":cudaMalloc\n/pid == 4242/\n\{', script)
    assert re.search(r'uretprobe:"[^\n]*":cudaMalloc\n/@start\[tid, 0\]/\n\{', script)


def test_end_clears_every_scratch_map(fake_libraries):
    script = export(RUNTIME_EVENTS + DRIVER_EVENTS, [CUDART, LIBCUDA])
    end = script[script.index("\nEND\n"):]
    filled = set(re.findall(r"(@\w+)\[[^\]]*\] =", script))
    assert filled == {"@start", "@arg", "@cfg", "@str", "@runtime_error", "@driver_error",
                      "@memcpy_kind"}
    assert {m for m in filled if f"clear({m});" in end} == filled


def test_summary_counts_and_histograms_per_function(fake_libraries):
    script = export(["cudaMemcpy", "cudaMalloc"], [CUDART], summary=True)
    # names NUL-padded to 8-byte multiples: bpftrace 0.17 lays keys out unaligned
    assert '@calls["cudaMemcpy_ptds"] = count();' in script
    assert '@latency_ns["cudaMalloc\\0\\0\\0\\0\\0"] = hist($lat_ns);' in script
    assert ('@errors["cudaMalloc\\0\\0\\0\\0\\0", (int64)$rc, @runtime_error[$rc]] = count();'
            in script)
    assert "@arg" not in script and "printf(\"%6lu" not in script
    end = script[script.index("\nEND\n"):]
    assert "clear(@calls)" not in end and "clear(@latency_ns)" not in end


def c_printf(fmt: str, *values) -> str:
    """What C's printf makes of `fmt`, as bpftrace's output does."""
    buf = ctypes.create_string_buffer(4096)
    args = [v.encode() if isinstance(v, str) else ctypes.c_long(v) for v in values]
    ctypes.CDLL(None).snprintf(buf, len(buf), fmt.encode(), *args)
    return buf.value.decode()


def test_banner_columns_line_up_with_rows(fake_libraries):
    script = export(["cudaMalloc", "cudaDeviceSynchronize"], [CUDART])
    header = re.search(r'printf\("(%10s[^"]*)\\n", (.*)\);', script)
    titles = re.findall(r'"([^"]+)"', header.group(2))
    assert titles == [c.title for c in COLUMNS]
    head = c_printf(header.group(1), *titles)
    rows = [c_printf(re.search(r'printf\("(%6lu[^"]* ' + name + r' [^"]*)\\n"', script)[1], *values)
            for name, values in (
                ("cudaMalloc", [1234, 567, "python3", 31337, 31338, 12, 345, 0,
                                "cudaErrorInsufficientDriver", 0xdead0000, 1 << 20]),
                ("cudaDeviceSynchronize", [1, 2, "x", 1, 1, 1, 2, 0, "cudaSuccess"]))]
    start = 0
    for column in COLUMNS[:-2]:  # each cell `width` wide, then one space
        end = start + column.width
        assert head[start:end].strip() == column.title and head[end] == " ", column
        for row in rows:
            assert row[start:end].strip() and row[end] == " ", (column, row)
        start = end + 1
    assert head[start:] == "RESULT                       DETAILS"
    assert rows[0][start:] == "cudaErrorInsufficientDriver  devPtr=0xdead0000 size=1048576"
    assert rows[1][start:] == "cudaSuccess"  # no details, no trailing blanks


def test_unknown_codes_and_kinds_print_as_numbers():
    # %.0d prints nothing for 0: a named code passes 0, an unnamed one its value
    assert c_printf("%.0d%-28s|", 0, "cudaSuccess") == f"{'cudaSuccess':<28}|"
    assert c_printf("%.0d%-28s|", 12345, "") == "12345" + " " * 28 + "|"
    assert c_printf("kind=%s%.0d", "HostToDevice", 0) == "kind=HostToDevice"
    assert c_printf("kind=%s%.0d", "", 7) == "kind=7"


def test_every_argument_kind_has_a_decoder():
    for kind in ArgKind:
        name = "gridDimZ" if kind is ArgKind.DIM else "x"
        assert arg_field(Arg(name, kind), 0, 0) is not None, kind


def test_the_whole_catalogue_renders(monkeypatch):
    everything = {s for f in FUNCTIONS for s in f.symbols}
    monkeypatch.setattr(probes_module, "read_symbols", lambda path: SimpleNamespace(
        path=path, is_pie_or_shared=True, functions=dict.fromkeys(everything, 0x1000),
        vaddrs=dict.fromkeys(everything, 0x1000), by_address=(), loads=()))
    monkeypatch.setattr(probes_module, "as_file", named_only)
    script = export(["all"], [CUDART], apis=("runtime", "driver", "nccl"))
    assert script.count("\nuprobe:") == len(everything)
    assert "\t\t\n" not in script and "${" not in script


def test_header_says_what_made_it_and_how_to_run_it(fake_libraries):
    script = export(["cudaMalloc"], [CUDART])
    assert script.startswith("#!/usr/bin/env bpftrace\n/*\n")
    assert " *   cudaprobe export bpftrace (test)\n" in script
    assert "Needs bpftrace 0.17 or newer" in script
    assert " *   sudo bpftrace cuda_events.bt -c '/path/to/app args'\n" in script


def test_a_placeholder_left_unfilled_fails():
    with pytest.raises(ValueError, match="'legend' is not filled"):
        _fill(_HEADER, name="a", what="b", version="1", command="c", min_version="0.17",
              env="", probes="1", libraries="")


def test_paths_are_quoted_for_bpftrace():
    assert quote_probe_path("/opt/cuda 13/libcudart.so") == '"/opt/cuda 13/libcudart.so"'
    assert quote_probe_path('/a "b"/c.so') == '"/a \\"b\\"/c.so"'
    for bad in ("/a\\b/c.so", "/a\nb/c.so", "/a:b/c.so"):
        with pytest.raises(UsageError, match="symlink"):
            quote_probe_path(bad)


def test_comment_cannot_be_closed_by_a_path(fake_libraries, monkeypatch):
    odd = "/opt/x*/lib*/libcudart.so.13"
    EXPORTED[odd] = {"cudaMalloc"}
    try:
        script = export(["cudaMalloc"], [odd])
    finally:
        del EXPORTED[odd]
    header = script[:script.index("*/\n") + 3]
    assert "*\\/lib*\\/libcudart" in header and header.count("*/") == 1


def run(*args, nobody=False):
    argv = as_not_root(cudaprobe_cmd(*args)) if nobody else cudaprobe_cmd(*args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S)


def test_cli_writes_an_executable_script_without_root():
    lib = libcudart_path()
    if lib is None:
        pytest.skip("no libcudart in the CUDA toolkit")
    with tempfile.TemporaryDirectory() as where:  # one that nobody can write to
        os.chmod(where, 0o777)
        check_cli_output(lib, Path(where) / "cuda_events.bt")


def check_cli_output(lib: Path, out: Path) -> None:
    p = run("export", "bpftrace", "--lib", str(lib), "-e", "memory", "-o", str(out), nobody=True)
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    text = out.read_text()
    assert text.startswith("#!/usr/bin/env bpftrace\n")
    assert f" *   cudaprobe export bpftrace --lib {lib} --events memory -o cuda_events.bt\n" in text
    assert "cudaMalloc" in text and "cudaMemcpy" not in text
    p = run("export", "bpftrace", "--lib", str(lib), "-o", str(out))
    assert p.returncode == 2 and "--force" in p.stderr
    assert run("export", "bpftrace", "--lib", str(lib), "-o", str(out), "--force").returncode == 0


def test_cli_pid_needs_root_and_a_process():
    p = run("export", "bpftrace", "--pid", "1", nobody=True)
    assert p.returncode == 2
    assert p.stderr.startswith("cudaprobe: export --pid needs root") and p.stderr.count("\n") == 1
    p = run("export", "bpftrace", "-e", "cudaMallc")
    assert p.returncode == 2 and "cudaMalloc" in p.stderr and "Traceback" not in p.stderr


def test_help_names_every_api():
    """--api's help names each choice it offers (NCCL was left out)."""
    from click.testing import CliRunner  # noqa: PLC0415

    from cudaprobe.cli import main  # noqa: PLC0415

    text = " ".join(CliRunner().invoke(main, ["export", "bpftrace", "--help"]).output.split())
    assert "driver (libcuda), NCCL (libnccl), or all" in text
