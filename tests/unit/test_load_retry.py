"""A BPF load that the verifier gave up on because a signal came (EAGAIN, as
under py-spy) is tried again; any other failure, and the last try's, is not
hidden (cudaprobe/probe/load.py: retry_interrupted)."""

from __future__ import annotations

import pytest

from cudaprobe.probe.load import LOAD_TRIES, retry_interrupted


def failing(times: int, text: str):
    calls = []

    def load():
        calls.append(1)
        if len(calls) <= times:
            raise Exception(f"Failed to load BPF program b'cp_enter': {text}")
        return "loaded"
    return load, calls


def test_an_interrupted_load_is_tried_again():
    load, calls = failing(2, "Resource temporarily unavailable")
    assert retry_interrupted(load) == "loaded" and len(calls) == 3


def test_another_failure_is_raised_at_once():
    load, calls = failing(1, "Permission denied")
    with pytest.raises(Exception, match="Permission denied"):
        retry_interrupted(load)
    assert len(calls) == 1


def test_the_last_try_s_failure_is_raised():
    load, calls = failing(LOAD_TRIES, "Resource temporarily unavailable")
    with pytest.raises(Exception, match="temporarily unavailable"):
        retry_interrupted(load)
    assert len(calls) == LOAD_TRIES
