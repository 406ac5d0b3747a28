"""No shell is ever run with what a user typed; output files are private.

The shell check reads the package's source (AST): no os.system/os.popen,
no subprocess call with shell=True or with one string for a command line
(which only a shell would split).
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from cudaprobe.errors import OutputError, OutputFailed
from cudaprobe.output.files import LazyOutputFile, check_output_path, open_output

PACKAGE = Path(__file__).resolve().parents[2] / "cudaprobe"
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "getoutput",
                    "getstatusoutput"}


def shell_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
        if owner == "os" and name in ("system", "popen") or name.startswith("spawnl"):
            found.append(f"os.{name} at line {node.lineno}")
        if name in SUBPROCESS_CALLS and owner in ("subprocess", ""):
            if name in ("getoutput", "getstatusoutput"):
                found.append(f"subprocess.{name} at line {node.lineno}")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    found.append(f"shell= at line {node.lineno}")
            if node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr,
                                                       ast.BinOp)):
                found.append(f"a string command line at line {node.lineno}")
    return found


def test_no_shell_anywhere_in_the_package():
    problems = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = shell_uses(ast.parse(path.read_text(), str(path)))
        if found:
            problems[str(path.relative_to(PACKAGE))] = found
    assert problems == {}


def test_the_check_would_catch_a_shell():
    bad = ("import os, subprocess\nos.system('ls ' + p)\nsubprocess.run(f'ls {p}')\n"
           "subprocess.Popen(['ls'], shell=True)\nsubprocess.getoutput('x')\n")
    lines = {int(f.rsplit(" ", 1)[1]) for f in shell_uses(ast.parse(bad))}
    assert lines == {2, 3, 4, 5}


@pytest.fixture
def umask_zero():
    old = os.umask(0)
    yield
    os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_output_is_0600_whatever_the_umask(tmp_path, umask_zero):
    out = tmp_path / "calls.jsonl"
    f = open_output(str(out), force=False)
    f.write("{}\n")
    f.close()
    assert mode_of(out) == 0o600


def test_mode_is_applied_exactly(tmp_path):
    old = os.umask(0o077)  # would take the group's read bit away
    try:
        out = tmp_path / "calls.jsonl"
        f = open_output(str(out), force=False, mode=0o640)
        f.write("{}\n")
        f.close()
    finally:
        os.umask(old)
    assert mode_of(out) == 0o640


def test_force_makes_an_overwritten_file_private_again(tmp_path):
    out = tmp_path / "calls.jsonl"
    out.write_text("old\n")
    out.chmod(0o644)
    f = open_output(str(out), force=True)
    f.write("new\n")
    f.close()
    assert out.read_text() == "new\n"
    assert mode_of(out) == 0o600


def test_no_file_until_the_first_write_and_none_left_by_the_check(tmp_path):
    out = tmp_path / "calls.jsonl"
    f = open_output(str(out), force=False)
    assert not out.exists()  # check_output_path created and removed it
    f.close()
    assert not out.exists()


def test_symlinks_are_refused_even_with_force(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep\n")
    link = tmp_path / "calls.jsonl"
    link.symlink_to(target)
    with pytest.raises(OutputError, match="is a symbolic link"):
        check_output_path(str(link), force=True)
    # and if one appears between the check and the first write
    f = LazyOutputFile(str(tmp_path / "later.jsonl"), force=True)
    (tmp_path / "later.jsonl").symlink_to(target)
    f.write("x\n")
    with pytest.raises(OutputFailed, match="cannot create .*later.jsonl.*: Too many levels"):
        f.close()  # the failure, said at the end when nothing else said it
    assert target.read_text() == "keep\n"
