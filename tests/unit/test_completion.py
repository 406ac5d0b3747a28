"""`cudaprobe completion SHELL` prints click's script; -e completes function and
category names, in comma-separated lists and after `!`."""

from __future__ import annotations

import os
import subprocess

import pytest

from cudaprobe.commands.completion import complete_events

from ..conftest import HANG_S, cudaprobe_cmd


def values(incomplete: str) -> list[str]:
    return [item.value for item in complete_events(None, None, incomplete)]


def test_events_complete_names_categories_and_all():
    assert values("cudaMallocH") == ["cudaMallocHost"]
    assert "memory" in values("me") and "all" in values("")
    assert values("memory,cudaFreeH") == ["memory,cudaFreeHost"]
    assert values("memory,!cudaFreeH") == ["memory,!cudaFreeHost"]
    assert values("!transf") == ["!transfer"]
    assert "cuMemAlloc" in values("cuMemAl")
    assert values("nosuchfunction") == []


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F"),
                                           ("zsh", "#compdef cudaprobe"),
                                           ("fish", "complete --no-files --command cudaprobe")])
def test_completion_prints_the_shells_script(shell, marker):
    p = subprocess.run(cudaprobe_cmd("completion", shell), capture_output=True, text=True,
                       timeout=HANG_S)
    assert p.returncode == 0 and marker in p.stdout and "_CUDAPROBE_COMPLETE" in p.stdout


def test_completion_of_an_unknown_shell_is_one_line():
    p = subprocess.run(cudaprobe_cmd("completion", "tcsh"), capture_output=True, text=True,
                       timeout=HANG_S)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "tcsh" in p.stderr


@pytest.mark.parametrize("words, cword, expect", [
    ("cudaprobe trace -e memory,cudaMallocH", 3, "plain,memory,cudaMallocHost"),
    ("cudaprobe stats -e kern", 3, "plain,kernel"),
    ("cudaprobe list -e sy", 3, "plain,sync"),
    ("cudaprobe comp", 1, "plain,completion"),
    # a `!` inserted bare would be history expansion: quoted
    ("cudaprobe trace -e memory,!cudaFreeH", 3, "plain,'memory,!cudaFreeHost'"),
    # bash splits --events=mem at the `=`: still -e's values
    ("cudaprobe trace --events = mem", 4, "plain,memory"),
    ("cudaprobe stats -e = kern", 4, "plain,kernel"),
])
def test_what_the_bash_script_asks_is_answered(words, cword, expect):
    env = {**os.environ, "_CUDAPROBE_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(cword)}
    p = subprocess.run(cudaprobe_cmd(), capture_output=True, text=True, timeout=HANG_S, env=env)
    assert p.returncode == 0 and p.stdout.split("\n")[:1] == [expect], p.stdout
