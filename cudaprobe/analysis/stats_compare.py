"""`cudaprobe stats --compare BASELINE.json`: flag functions whose call count or
p50 latency moved by more than a threshold, for regression tests in CI.

Both sides are reports in the --json schema (docs/stats.md). A function that
only one side called moved by 100% (or from nothing). p50 is compared only
where both runs made at least `min_calls` calls: a median of a handful of
calls is noise. p50 comes from log2 buckets (see stats.py), so thresholds much
below the bucket width flag noise too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cudaprobe.analysis.stats import SCHEMA
from cudaprobe.errors import UsageError

DEFAULT_THRESHOLD = 20.0  # percent
DEFAULT_MIN_CALLS = 10
REGRESSION_EXIT = 3  # exit status when something moved; 2 is cudaprobe's own errors


@dataclass(frozen=True)
class Change:
    event: str
    metric: str  # "count" or "p50_ns"
    before: int
    after: int

    @property
    def percent(self) -> float | None:
        """Relative change; None when the baseline had nothing."""
        return None if self.before == 0 else (self.after - self.before) / self.before * 100

    def to_dict(self) -> dict[str, Any]:
        pct = self.percent
        return {"event": self.event, "metric": self.metric, "before": self.before,
                "after": self.after, "percent": None if pct is None else round(pct, 1)}


def load_report(path: str) -> dict[str, Any]:
    """A stats report written by `cudaprobe stats --json`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read baseline {path!r}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"baseline {path!r} is not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("cudaprobe") != "stats":
        raise UsageError(f"baseline {path!r} is not a `cudaprobe stats --json` report")
    if data.get("schema") != SCHEMA:
        raise UsageError(f"baseline {path!r} has schema {data.get('schema')!r}; "
                         f"this cudaprobe reads schema {SCHEMA}")
    functions = data.get("functions")
    if not isinstance(functions, list) or not all(map(_is_entry, functions)):
        raise UsageError(f"baseline {path!r}: `functions` is not a list of entries with an "
                         "`event` name, a `count` and a `p50_ns` (whole numbers)")
    return data


def _is_entry(entry: object) -> bool:
    """A baseline's per-function entry, as compare() reads it."""
    def whole(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return (isinstance(entry, dict) and isinstance(entry.get("event"), str)
            and whole(entry.get("count")) and whole(entry.get("p50_ns", 0)))


def _by_event(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["event"]: f for f in report.get("functions", [])}


def _moved(before: int, after: int, threshold: float) -> bool:
    if before == 0:
        return after != 0
    return abs(after - before) / before * 100 > threshold


def compare(baseline: dict[str, Any], current: dict[str, Any],
            threshold: float = DEFAULT_THRESHOLD,
            min_calls: int = DEFAULT_MIN_CALLS) -> list[Change]:
    """Changes beyond `threshold` percent, by event name then metric."""
    before, after = _by_event(baseline), _by_event(current)
    changes = []
    for event in sorted(set(before) | set(after)):
        b, a = before.get(event, {}), after.get(event, {})
        b_count, a_count = b.get("count", 0), a.get("count", 0)
        if _moved(b_count, a_count, threshold):
            changes.append(Change(event, "count", b_count, a_count))
        if b_count >= min_calls and a_count >= min_calls and \
                _moved(b["p50_ns"], a["p50_ns"], threshold):
            changes.append(Change(event, "p50_ns", b["p50_ns"], a["p50_ns"]))
    return changes
