"""A sweep over pure data as one test: every item is checked, and the test
fails with one entry per item that failed (its name and what was wrong),
rather than as one pytest item per catalogue function."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def check_every(items: Iterable[T], check: Callable[[T], object],
                name: Callable[[T], str] = str) -> None:
    """Run check(item) on every item; fail listing each item whose check raised."""
    failed, count = [], 0
    for item in items:
        count += 1
        try:
            check(item)
        except Exception as e:  # noqa: BLE001 - each item's failure is reported below
            what = str(e) if isinstance(e, AssertionError) else f"{type(e).__name__}: {e}"
            failed.append(f"{name(item)}: " + what.replace("\n", "\n    "))
    assert count, "nothing to check"
    assert not failed, f"{len(failed)} of {count} failed:\n" + "\n".join(failed)
