"""One way to count what is traced (trace, doctor, list), and kernel threads told apart."""

from __future__ import annotations

import os
import subprocess

from cudaprobe.catalogue.count import count_text
from cudaprobe.targets.procmaps import is_kernel_thread

from ..conftest import HANG_S, cudaprobe_cmd


def test_functions_and_symbols_counted_once_each():
    assert count_text(["cudaMemcpyAsync", "cudaMemcpyAsync"],
                      ["cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"]) == "1 function, 2 symbols"
    assert count_text([], []) == "0 functions, 0 symbols"
    assert count_text(["a", "b"], ["a"]) == "2 functions, 1 symbol"


def test_list_ends_with_its_count():
    p = subprocess.run(cudaprobe_cmd("list", "-e", "cudaMemcpyAsync"), capture_output=True,
                       text=True, timeout=HANG_S)
    assert p.returncode == 0
    assert p.stdout.rstrip().splitlines()[-1].strip().startswith("1 function, 2 symbols; ")


def test_this_process_is_not_a_kernel_thread():
    assert not is_kernel_thread(os.getpid())
    if os.path.exists("/proc/2/stat") and open("/proc/2/comm").read().strip() == "kthreadd":
        assert is_kernel_thread(2)
