"""cudaprobe doctor: each check's verdict on machines described by stand-ins,
and the command on this machine, as root and not."""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections import namedtuple

import pytest
from rich.console import Console

from cudaprobe.doctor import checks as doctor
from cudaprobe.doctor.checks import FAIL, OK, WARN
from cudaprobe.output.doctor_view import render_checks
from cudaprobe.targets import environment

from ..conftest import HANG_S, as_not_root, cudaprobe_cmd, not_root_uid

Uname = namedtuple("Uname", "sysname nodename release version machine")


def fake_uname(monkeypatch, release: str, machine: str = "x86_64") -> None:
    monkeypatch.setattr(doctor.os, "uname",
                        lambda: Uname("Linux", "box", release, "#1", machine))


def fake_status(monkeypatch, **fields: str) -> None:
    monkeypatch.setattr(environment, "status_field", lambda name, pid="self": fields.get(name))


ALL_CAPS = "000001ffffffffff"


@pytest.mark.parametrize(("euid", "caps", "status", "fix"), [
    (0, ALL_CAPS, OK, ""),
    (0, f"{(1 << 38) | (1 << 39):016x}", OK, ""),  # CAP_BPF + CAP_PERFMON is enough
    (0, f"{1 << 21:016x}", OK, ""),  # so is CAP_SYS_ADMIN (kernels before CAP_BPF)
    (0, f"{1 << 39:016x}", FAIL, "--cap-add BPF --cap-add PERFMON"),
    (1000, ALL_CAPS, FAIL, "run it with sudo"),
])
def test_privileges(monkeypatch, euid, caps, status, fix):
    monkeypatch.setattr(doctor.os, "geteuid", lambda: euid)
    fake_status(monkeypatch, CapEff=caps)
    check = doctor.check_privileges()
    assert check.status == status
    assert fix in check.fix


@pytest.mark.parametrize(("release", "machine", "status"), [
    ("6.18.44-fc", "x86_64", OK), ("5.8.0", "x86_64", OK), ("5.4.0-150-generic", "x86_64", FAIL),
    ("6.8.0", "aarch64", FAIL),
])
def test_kernel_version_and_architecture(monkeypatch, release, machine, status):
    fake_uname(monkeypatch, release, machine)
    assert doctor.check_kernel().status == status


def test_kernel_config_names_what_is_missing(monkeypatch):
    config = {k: "y" for k in doctor.KERNEL_CONFIG}
    monkeypatch.setattr(doctor, "read_kernel_config", lambda: ("/proc/config.gz", config))
    assert doctor.check_kernel_config().status == OK
    config["CONFIG_UPROBES"] = "n"
    del config["CONFIG_BPF_EVENTS"]
    check = doctor.check_kernel_config()
    assert check.status == FAIL
    assert check.found == "/proc/config.gz: CONFIG_UPROBES, CONFIG_BPF_EVENTS not set"
    assert check.fix == "a kernel built with CONFIG_UPROBES=y, CONFIG_BPF_EVENTS=y"


def test_kernel_config_probed_when_there_is_none(monkeypatch):
    monkeypatch.setattr(doctor, "read_kernel_config", lambda: (None, {}))
    check = doctor.check_kernel_config()
    assert check.status == WARN  # this machine has both the uprobe PMU and bpf()


def test_this_machines_kernel_config_is_read():
    where, config = doctor.read_kernel_config()
    if where is None:
        pytest.skip("no kernel config on this machine")
    assert config["CONFIG_BPF_SYSCALL"] == "y"


@pytest.mark.parametrize(("release", "seccomp", "status"), [
    ("6.10.3", "2", OK), ("6.11.0", "0", WARN), ("6.13.7", "2", FAIL), ("6.14.0", "2", OK),
    ("6.18.44", "0", OK),
])
def test_uretprobe_seccomp_hazard(monkeypatch, release, seccomp, status):
    fake_uname(monkeypatch, release)
    fake_status(monkeypatch, Seccomp=seccomp)
    monkeypatch.setattr(environment, "filtered_processes", lambda: 3)
    check = doctor.check_uretprobe_seccomp()
    assert check.status == status
    if status != OK:
        assert "killed by SIGSYS" in check.found and "6.14" in check.fix
    if status == WARN:
        assert "3 processes" in check.found


def test_headers_exact_fallback_missing(monkeypatch):
    H = environment.HeaderSource
    monkeypatch.setattr(environment, "current_headers", lambda: H("/usr/src/x", "/usr/src/x", True))
    assert doctor.check_headers().found == "exact: /usr/src/x"
    monkeypatch.setattr(environment, "current_headers", lambda: H("/usr/src/y", "/y", False))
    assert doctor.check_headers().found.startswith("fallback: /usr/src/y for ")
    monkeypatch.setattr(environment, "current_headers", lambda: None)
    monkeypatch.setattr(doctor.os.path, "isfile", lambda p: False)
    monkeypatch.setattr(environment, "find_fallback_headers", lambda: H("/usr/src/z", "/z", False))
    check = doctor.check_headers()
    assert check.status == WARN and check.found.endswith("`cudaprobe trace` links /usr/src/z")
    monkeypatch.setattr(environment, "find_fallback_headers", lambda: None)
    check = doctor.check_headers()
    assert check.status == FAIL and "apt-get install linux-headers" in check.fix


def test_pid_namespace_of_its_own_is_a_warning(monkeypatch):
    monkeypatch.setattr(doctor.sweep, "host_pids_visible", lambda: True)
    assert doctor.check_pid_namespace().status == OK
    monkeypatch.setattr(doctor.sweep, "host_pids_visible", lambda: False)
    check = doctor.check_pid_namespace()
    assert check.status == WARN and "--pid=host" in check.fix


def test_tracefs_unmounted_is_a_warning_when_trace_can_mount_it(monkeypatch):
    monkeypatch.setattr(environment, "tracefs_mounted", lambda: False)
    check = doctor.check_tracefs()
    assert check.status == WARN and check.fix == "mount -t tracefs nodev /sys/kernel/tracing"
    monkeypatch.setattr(environment, "TRACEFS", "/nonexistent/tracing")
    assert doctor.check_tracefs().status == FAIL


def test_cuda_library_lists_the_catalogue_functions_it_defines(libcudart):
    (check,) = doctor.check_cuda([str(libcudart)])
    assert check.status == OK
    d = check.details
    assert d["api"] == "runtime" and d["path"] == str(libcudart)
    assert "cudaMalloc" in d["functions"] and "cudaLaunchKernel" in d["functions"]
    assert (f"{len(d['functions'])} functions, " in check.found
            and f"(of {len(d['functions']) + len(d['missing'])} catalogue functions)"
            in check.found)


def test_cuda_library_that_is_not_one(tmp_path):
    (check,) = doctor.check_cuda(["/bin/true"])  # named by --lib: it would trace nothing
    assert check.status == FAIL and "0 functions, 0 symbols (of" in check.found
    text = tmp_path / "libcudart.so.12"
    text.write_text("not ELF")
    (check,) = doctor.check_cuda([str(text)])
    assert check.status == FAIL and "not an ELF file" in check.found


def test_render_says_whether_tracing_works():
    checks = [doctor.Check("privileges", FAIL, "uid 1000, not root", "run it with sudo"),
              doctor.Check("CUDA library", OK, "/opt/[lib]/libcudart.so.12: runtime 12")]
    out = io.StringIO()
    render_checks(checks, Console(file=out, width=200))
    text = out.getvalue()
    assert "/opt/[lib]/libcudart.so.12" in text  # not eaten as markup
    assert text.rstrip().endswith("tracing will not work: fix privileges")
    assert doctor.to_json(checks)["tracing_works"] is False


def test_doctor_command_json_agrees_with_its_exit_status():
    proc = subprocess.run(cudaprobe_cmd("doctor", "--json"), capture_output=True, text=True,
                          timeout=HANG_S)
    report = json.loads(proc.stdout)
    names = [c["name"] for c in report["checks"]]
    assert names[:11] == ["privileges", "kernel", "kernel config", "BTF", "tracefs",
                          "kernel headers", "bcc", "bpftrace", "attach", "pid namespace",
                          "uretprobe + seccomp"]
    assert all(c["status"] in (OK, WARN, FAIL) for c in report["checks"])
    assert proc.returncode == (0 if report["tracing_works"] else 1)
    assert report["tracing_works"] == all(c["status"] != FAIL for c in report["checks"])


def test_doctor_as_a_user_who_is_not_root_says_so_and_fails():
    proc = subprocess.run(as_not_root(cudaprobe_cmd("doctor")), capture_output=True,
                          text=True, timeout=HANG_S, cwd="/")
    assert proc.returncode == 1, proc.stderr
    assert f"uid {not_root_uid()}, not root" in proc.stdout
    assert "tracing will not work: fix privileges" in proc.stdout


def test_trace_warns_of_the_seccomp_hazard_before_attaching(monkeypatch):
    fake_uname(monkeypatch, "6.12.9")
    monkeypatch.setattr(environment, "filtered_processes", lambda: 4)
    warning = environment.seccomp_warning()
    assert "killed by SIGSYS" in warning and "4 run under one now" in warning
    fake_uname(monkeypatch, "6.14.1")
    assert environment.seccomp_warning() is None


def test_a_library_named_by_lib_that_defines_no_function_fails():
    """doctor --lib libc.so.6: tracing it would trace nothing, so tracing will
    not work; found by the search, the same library is only a warning."""
    libc = next(p for p in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6")
                if os.path.exists(p))
    named = doctor.check_cuda([libc])
    assert [c.status for c in named] == [FAIL] and "0 functions" in named[0].found
    assert not doctor.tracing_works(named)
    assert doctor._check_library(libc).status == WARN


def test_gpu_time_says_where_its_library_is_and_warns_without_one(monkeypatch, tmp_path):
    from cudaprobe.targets import cupti, injectable  # noqa: PLC0415
    scope = tmp_path / "ptrace_scope"
    scope.write_text("1\n")
    monkeypatch.setattr(injectable, "YAMA", str(scope))
    monkeypatch.setattr(cupti, "cupti_library", lambda: "/opt/cuda/lib64/libcupti.so.13")
    monkeypatch.setattr(cupti, "shipped_library", lambda: tmp_path / "gputime-1.so")
    c = doctor.check_gpu_time()
    assert c.status == OK and c.found.startswith(f"shipped with cudaprobe ({tmp_path}")
    assert "libcupti /opt/cuda/lib64/libcupti.so.13" in c.found
    monkeypatch.setattr(cupti, "shipped_library", lambda: None)
    monkeypatch.setattr(cupti, "library_path", lambda: (None, "no CUPTI headers (x)"))
    monkeypatch.setattr(cupti, "cupti_library", lambda: "")
    c = doctor.check_gpu_time()
    assert c.status == WARN and "no library: no CUPTI headers" in c.found
    assert "a process's own is used" in c.found and "headers" in c.fix
    monkeypatch.setattr(cupti, "library_path", lambda: (tmp_path / "cache" / "gputime-2.so", ""))
    c = doctor.check_gpu_time()
    assert c.status == OK and f"to be built at its first use, into {tmp_path}/cache" in c.found
    scope.write_text("3\n")
    c = doctor.check_gpu_time()
    assert c.status == WARN and "Yama ptrace_scope 3" in c.found and "ptrace_scope" in c.fix
