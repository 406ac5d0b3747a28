"""cudaprobe's caches against another user (nobody), cudaprobe as root with
that user's environment (as `sudo -E` keeps it): a --gpu-time library
planted where the user's HOME, XDG_CACHE_HOME or CUDAPROBE_CACHE point is
never loaded, and a compiler named by CC or found first on PATH is never
run; root's own cache (/var/cache/cudaprobe, or a directory only root can
write) is used instead, or none, said in one line. A symbol table is kept
only from the node's own files: not from a user's file, nor from a root-owned
file seen only inside a container's mount namespace, whatever build-id they
claim."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaprobe.targets import cupti
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import HANG_S, NOBODY, as_not_root, build_workload
from .conftest import trace_jsonl
from .running import Lines, Tracing
from .test_gputime import gpu_lines, program


@pytest.fixture
def attacker() -> Iterator[Path]:
    """A directory of nobody's, the way to it root's: where the user keeps a cache."""
    if os.geteuid() != 0:
        pytest.skip("cudaprobe as root against another user")
    where = Path(tempfile.mkdtemp(prefix="cudaprobe-attacker-", dir="/tmp"))
    try:
        where.chmod(0o755)
        os.chown(where, NOBODY, NOBODY)
        yield where
    finally:
        shutil.rmtree(where)


@pytest.fixture
def marker(tmp_path) -> Path:
    """Where the planted code leaves its mark, if it ever runs (anyone may write it)."""
    d = tmp_path / "marks"
    d.mkdir()
    d.chmod(0o1777)
    return d / "ran"


def as_nobody(*argv: str) -> None:
    subprocess.run(as_not_root(list(argv)), check=True)


def plant(attacker: Path, cache: Path) -> Path:
    """The planted library, put by nobody where cudaprobe's of this source
    would be in `cache` (a directory under nobody's)."""
    planted = build_workload("planted_library.c", "planted.so", extra=["-shared", "-fPIC"])
    name = cupti.library_path()[0].name  # gputime-<hash of the source>.so
    as_nobody("mkdir", "-p", str(cache))
    as_nobody("cp", str(planted), str(cache / name))
    assert (cache / name).stat().st_uid == NOBODY
    return cache / name


@pytest.mark.parametrize("via", ["CUDAPROBE_CACHE", "XDG_CACHE_HOME", "HOME"])
def test_a_library_planted_in_a_users_cache_is_not_loaded(tmp_path, libcuda, attacker, marker,
                                                          via):
    cache = {"CUDAPROBE_CACHE": attacker / "cache", "XDG_CACHE_HOME": attacker / "cudaprobe",
             "HOME": attacker / ".cache" / "cudaprobe"}[via]
    plant(attacker, cache)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDAPROBE_CACHE", "XDG_CACHE_HOME")}
    env.update({via: str(attacker if via != "CUDAPROBE_CACHE" else cache),
                "PLANTED_MARKER": str(marker), "TMPDIR": str(tmp_path)})
    exe = program(libcuda)
    calls, _, proc = trace_jsonl(tmp_path, "--gpu-time", "--lib", str(libcuda), "-e", "cuInit",
                                 command=[str(exe)], env=env)
    assert not marker.exists(), marker.read_text()  # the planted library never ran
    assert proc.returncode == 7 and "Traceback" not in proc.stderr, proc.stderr
    assert [c["event"] for c in calls] == ["cuInit"]
    if via == "CUDAPROBE_CACHE":  # the directory named is refused, in one line
        assert gpu_lines(proc.stderr) == [
            f"cudaprobe: no GPU time: the cache is not cudaprobe's alone ({attacker} is "
            f"owned by uid {NOBODY}): not used"]
    else:  # HOME and XDG_CACHE_HOME are not root's: root's own cache is used
        (line,) = gpu_lines(proc.stderr)
        assert line.startswith("cudaprobe: --gpu-time: no GPU activity was recorded: "), line


def test_a_compiler_the_user_names_is_never_run(tmp_path, libcuda, attacker, marker):
    """CC, and a `cc` (and gcc, as, ld) first on PATH, are the user's scripts
    that leave a mark: root builds with /usr/bin/cc all the same, into a
    cache only root can write."""
    script = f"#!/bin/sh\necho ran as $(id -u) >> {marker}\nexec /usr/bin/$(basename $0) \"$@\"\n"
    for name in ("cc", "gcc", "as", "ld", "evil-cc"):
        (attacker / name).write_text(script.replace("$(basename $0)", "cc")
                                     if name == "evil-cc" else script)
        (attacker / name).chmod(0o755)
        os.chown(attacker / name, NOBODY, NOBODY)
    cache = tmp_path / "root-cache"  # fresh: the library must be built
    env = {**os.environ, "CC": str(attacker / "evil-cc"),
           "PATH": f"{attacker}:{os.environ['PATH']}", "CUDAPROBE_CACHE": str(cache),
           "TMPDIR": str(tmp_path)}
    exe = program(libcuda)
    calls, _, proc = trace_jsonl(tmp_path, "--gpu-time", "--lib", str(libcuda), "-e", "cuInit",
                                 command=[str(exe)], env=env)
    assert not marker.exists(), marker.read_text()
    assert proc.returncode == 7 and "Traceback" not in proc.stderr, proc.stderr
    (built,) = cache.glob("gputime-*.so")
    st = built.stat()
    assert st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    (line,) = gpu_lines(proc.stderr)  # built, loaded, and CUPTI said why it had nothing
    assert line.startswith("cudaprobe: --gpu-time: no GPU activity was recorded: "), line
    assert [c["event"] for c in calls] == ["cuInit"]


def test_a_forged_build_id_does_not_name_a_later_trace(tmp_path, libcudart, attacker):
    """nobody runs a copy of a root program (two_kernels.cu) whose kernel
    `short_named` is renamed `rm_rf_slash`, the build-id kept: traced by root,
    its launch is named by its own table, and the cache keeps none of it; the
    root program traced next, with the same cache, is named rightly."""
    real = build_workload("two_kernels.cu", extra=["-cudart=shared"])
    forged = attacker / real.name
    data = real.read_bytes()
    assert data.count(b"short_named") >= 1
    forged.write_bytes(data.replace(b"short_named", b"rm_rf_slash"))
    forged.chmod(0o755)
    os.chown(forged, NOBODY, NOBODY)
    build_id = read_symbols(str(real)).build_id
    assert read_symbols(str(forged)).build_id == build_id
    cache = tmp_path / "cache"  # root's, as /var/cache/cudaprobe is
    env = {**os.environ, "CUDAPROBE_CACHE_DIR": str(cache)}

    def kernel_names(run: str, command: list[str]) -> list[str]:
        d = tmp_path / run
        d.mkdir()
        calls, _, proc = trace_jsonl(d, "--lib", str(libcudart), "--api", "runtime",
                                     command=command, env=env)
        assert proc.returncode == 0, proc.stderr
        return [c["args"].get("func_name") for c in calls if c["event"] == "cudaLaunchKernel"]

    assert kernel_names("forged", as_not_root([str(forged)]))[1] == "rm_rf_slash(int*)"
    kept_forged = (cache / "symbols" / build_id).exists()
    assert kernel_names("real", [str(real)])[1] == "short_named(int*)"
    assert not kept_forged
    assert (cache / "symbols" / build_id).exists()  # root's program: kept


def launch_named(tmp_path: Path, run: str, argv: list[str]) -> str | None:
    """held_kernel started by `argv`, traced by root with --pid while it
    launches (its maps read while it lives): the launch's kernel name."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        out = Lines(proc.stdout)
        out.wait_for(lambda s: s == '{"ready":1}', "ready")
        d = tmp_path / run
        d.mkdir()
        tracing = Tracing(d, "--pid", str(proc.pid), "--api", "runtime")
        tracing.wait_for("attached to")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out.wait_for(lambda s: s == '{"launched":1}', "launched")
        calls, _summary, _err = tracing.interrupt()  # the process still lives
        proc.stdin.close()
        assert proc.wait(timeout=HANG_S) == 0
    finally:
        proc.kill()
    (launch,) = [c for c in calls if c["event"] == "cudaLaunchKernel"]
    return launch["args"].get("func_name")


def test_a_containers_root_file_with_a_forged_build_id_does_not_name_a_later_trace(
        tmp_path, attacker, monkeypatch):
    """A container's image is unpacked as root: a tenant's file there is
    root's and read-only, yet theirs to choose. Here a private mount
    namespace (what a container runtime makes) holds a root-owned copy of a
    root program, its kernel renamed rm_rf_slash, the build-id kept; its
    process runs as nobody and is traced by root through its mapping. The
    root program traced next, with the same cache, is named rightly, and
    nothing the container's file gave was kept."""
    real = build_workload("held_kernel.cu", extra=["-cudart=shared"])
    data = real.read_bytes()
    assert data.count(b"short_named") >= 1
    image = tmp_path / "image-file"  # the image layer's bytes (root's)
    image.write_bytes(data.replace(b"short_named", b"rm_rf_slash"))
    build_id = read_symbols(str(real)).build_id
    assert read_symbols(str(image)).build_id == build_id
    root = attacker / "rootfs"  # where the container's files are; empty here
    root.mkdir()
    cache = tmp_path / "cache"  # root's, as /var/cache/cudaprobe is
    monkeypatch.setenv("CUDAPROBE_CACHE_DIR", str(cache))
    container = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                 'mount -t tmpfs -o mode=0755 image "$1" && cp "$2" "$1/prog" && '
                 'chmod 0755 "$1/prog" && shift 2 && exec "$@"', "sh", str(root), str(image),
                 *as_not_root([str(root / "prog")])]
    launch_named(tmp_path, "container", container)
    assert not (cache / "symbols" / build_id).exists()
    assert launch_named(tmp_path, "real", [str(real)]) == "short_named(int*)"
    assert (cache / "symbols" / build_id).exists()  # root's program: kept
