"""cudaprobe list: every catalogue function, its category, DEFAULT, EXPORTED."""

from __future__ import annotations

import re
import subprocess

import pytest

from cudaprobe.catalogue.functions import FUNCTIONS, is_default
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import HANG_S, cudaprobe_cmd, libcuda_path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cudaprobe_cmd("list", *args), capture_output=True, text=True,
                          timeout=HANG_S, env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})


def rows(stdout: str) -> dict[str, list[str]]:
    out = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) >= 5 and re.match(r"cu\w+$", cells[0]):
            out[cells[-1].split()[0]] = cells  # by the symbol: cuCtxCreate has two
    return out


def test_every_function_with_its_category_default_and_exported_symbols():
    libcuda = libcuda_path()
    if libcuda is None:
        pytest.skip("libcuda not extracted: run scripts/setup")
    p = run("--api", "driver", "--lib", str(libcuda))
    assert p.returncode == 0, p.stderr
    table = rows(p.stdout)
    driver = [f for f in FUNCTIONS if f.api == "driver"]
    assert set(table) == {f.symbol for f in driver}
    exported = read_symbols(str(libcuda)).functions
    for fn in driver:
        name, api, category, default, have = table[fn.symbol][:5]
        assert (api, category) == ("driver", fn.category)
        assert default.startswith("yes" if is_default(fn.name, fn.category) else "no")
        assert have == f"{sum(s in exported for s in fn.symbols)}/{len(fn.symbols)}", name
    # cuCtxCreate_v4 (CUDA 13) is not in the 535 driver; _v2 is
    symbols = sum(len(f.symbols) for f in driver)
    found = sum(s in exported for f in driver for s in f.symbols)
    # cuCtxCreate is two entries (_v2 and _v4, two ABIs): one function, as count_text counts
    names = len({f.name for f in driver})
    assert f"{names} functions, {symbols} symbols; {found} of them" in p.stdout
    assert 0 < found < symbols
