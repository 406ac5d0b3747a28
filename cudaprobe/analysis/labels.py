"""Which names get a metric label of their own: the busiest now, not the first seen.

A traced process picks its own name (comm) and its kernels' names. Labels
handed to the first names seen would let one tenant, by starting many short
processes with junk names before the real jobs, push every real job into
`other` for as long as the exporter runs. A `LabelBudget` instead ranks the
names by a moving rate of what they weigh (calls, launches, GPU nanoseconds),
halved every `HALF_LIFE_S` seconds, and ranks again at each `rank()` (each
snapshot: a scrape, an export): the `limit` names of highest rate hold labels
until the next. A name seen while labels are left over gets one at once, so
a node with fewer names than the limit labels every name, as soon as seen.

Counters stay monotonic: an exporter adds each count to the series of the
label its name held when it was counted (`label()`) and never moves it. A
name that enters the top gets its own series from then on (what it did
before stays in `other`); one that leaves stops being exported, its series
kept in memory for its return, and its later counts go to `other`.

Memory is bounded: the rates of at most `tracked` names are kept. A new name
that finds the table full drops the half of lowest rate (the labelled names
are kept): a flood of names each making one call goes, a name busy enough to
matter is above that half and stays. The series of a dropped name are
dropped with it (`known()` says which to keep); if it comes back its series
starts again at 0, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

from typing import Any

OTHER = "other"
HALF_LIFE_S = 60.0


class LabelBudget:
    """`label(name, weight)` on every count, `rank(now_ns)` at every snapshot."""

    def __init__(self, limit: int, tracked: int, half_life_s: float = HALF_LIFE_S,
                 other: Any = OTHER) -> None:
        """`other`: the label of the rest (a tuple where the names are tuples)."""
        if tracked < 2 * limit:
            raise ValueError("tracked must leave room for twice the labelled names")
        self.other = other
        self.limit = limit
        self.tracked = tracked
        self.half_life_ns = half_life_s * 1e9
        self._rate: dict[str, float] = {}  # name -> weight, decayed to the last rank
        self._fresh: dict[str, float] = {}  # name -> weight since the last rank, not decayed
        self._labelled: set[str] = set()
        self._ranked_ns: int | None = None

    def label(self, name: Any, weight: float = 1) -> Any:
        """The label `name` holds now (None: a name not known), its weight counted."""
        if name is None or name == self.other:
            return self.other
        if name not in self._rate:
            if len(self._rate) >= self.tracked:
                self._drop_lower_half()
            self._rate[name] = 0.0
            if len(self._labelled) < self.limit:
                self._labelled.add(name)  # labels left over: one at once
        self._fresh[name] = self._fresh.get(name, 0) + weight
        return name if name in self._labelled else self.other

    def holds(self, name: Any) -> Any:
        """The label `name` holds now, nothing counted (a gauge's label)."""
        return name if name in self._labelled else self.other

    def exported(self, label: Any) -> bool:
        """Whether the series of `label` are exported now."""
        return label == self.other or label in self._labelled

    def known(self, label: Any) -> bool:
        """Whether the series of `label` are worth keeping (its name is tracked)."""
        return label == self.other or label in self._rate

    def rank(self, now_ns: int) -> None:
        """Decay the rates to `now_ns` and label the `limit` names of highest rate;
        on a tie the name labelled already keeps its label (no flapping)."""
        factor = 1.0
        if self._ranked_ns is not None and now_ns > self._ranked_ns:
            factor = 0.5 ** ((now_ns - self._ranked_ns) / self.half_life_ns)
        self._ranked_ns = now_ns if self._ranked_ns is None else max(now_ns, self._ranked_ns)
        fresh = self._fresh
        self._rate = {n: r * factor + fresh.get(n, 0) for n, r in self._rate.items()}
        self._fresh = {}
        order = sorted(self._rate, key=lambda n: (-self._rate[n], n not in self._labelled, n))
        self._labelled = set(order[: self.limit])

    def _drop_lower_half(self) -> None:
        def weight(n: str) -> float:
            return self._rate[n] + self._fresh.get(n, 0)
        rest = sorted((n for n in self._rate if n not in self._labelled),
                      key=lambda n: (-weight(n), n))
        keep = set(rest[: self.tracked // 2 - len(self._labelled)]) | self._labelled
        self._rate = {n: r for n, r in self._rate.items() if n in keep}
        self._fresh = {n: w for n, w in self._fresh.items() if n in keep}
