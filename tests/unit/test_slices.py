"""serve --duty's slices (cudaprobe/analysis/slices.py): where a call lies."""

from __future__ import annotations

from cudaprobe.analysis.slices import SliceSpans


def test_a_slice_holds_from_its_begin_to_its_length_or_its_end_whichever_is_sooner():
    spans = SliceSpans()
    spans.length_ns = 100
    assert 5 not in spans  # no slice yet
    spans.begin(1_000)
    assert 999 not in spans and 1_000 in spans and 1_099 in spans and 1_100 not in spans
    spans.end(1_200)  # told late: the length holds
    assert 1_150 not in spans
    spans.begin(2_000)
    spans.end(2_050)  # told early: the end holds
    assert 2_049 in spans and 2_050 not in spans
    assert 1_050 in spans  # an earlier slice, for a decoder behind
    assert list(spans) == [(1_000, 1_100), (2_000, 2_050)]


def test_the_oldest_slices_go_past_kept_the_latest_stay_whole():
    spans = SliceSpans()
    spans.length_ns = 10
    for n in range(SliceSpans.KEPT + 1):
        spans.begin(100 * n)
    kept = list(spans)
    assert len(kept) == SliceSpans.KEPT // 2 + 1
    assert kept[-1] == (100 * SliceSpans.KEPT, 100 * SliceSpans.KEPT + 10)
    assert all(end == begin + 10 for begin, end in kept)
    assert 100 * SliceSpans.KEPT + 5 in spans and 5 not in spans
