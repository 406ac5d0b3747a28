"""--format chrome: Chrome Trace Event JSON rendered to a StringIO and checked
with tests/chrome_check.py, which the GPU check uses too."""

from __future__ import annotations

import io
import json

import pytest

from cudaprobe.analysis.summary import Summary
from cudaprobe.catalogue import functions as catalogue
from cudaprobe.decode.calls import decode_event
from cudaprobe.output import chrome as chrome_reporter
from cudaprobe.output.formats import REPORTERS, choose_format
from cudaprobe.probe.plan import Probe

from .. import chrome_check
from .eventbuild import make_event

T0 = 5_000_000_000  # the attach time, CLOCK_MONOTONIC ns
PROBES = [Probe(i, symbol, catalogue.BY_NAME[name]) for i, (symbol, name) in enumerate([
    ("cudaMalloc", "cudaMalloc"), ("cuMemAlloc_v2", "cuMemAlloc"),
    ("cudaLaunchKernel", "cudaLaunchKernel"), ("cuCtxSynchronize", "cuCtxSynchronize"),
    ("cudaDeviceSynchronize", "cudaDeviceSynchronize")])]
FUNC_ID = {p.symbol: p.func_id for p in PROBES}


def call(symbol, start_us, end_us=None, pid=7, tid=8, comm="train", ret=0, args=(),
         symbolize=None):
    """A call decoded from a raw event: starting start_us after attach, ending at
    end_us (None: still running); out-parameters read (zero) if it returned 0."""
    dur = 0 if end_us is None else round((end_us - start_us) * 1000)
    raw = make_event(args, ret=ret, ts_ns=T0 + round(start_us * 1000), duration_ns=dur,
                     pid=pid, tid=tid, func_id=FUNC_ID[symbol], comm=comm)
    if end_us is None:
        raw = raw._replace(outs=())
    return decode_event(raw, PROBES, T0, symbolize, in_flight=end_us is None)


def render(*batches, summary=None):
    """What the chrome reporter writes for these batches of calls, parsed."""
    buf = io.StringIO()
    r = REPORTERS["chrome"](buf)
    r.start()
    for batch in batches:
        r.calls(batch)
    r.finish(summary or Summary())
    return json.loads(buf.getvalue())


def checked(events):
    report = chrome_check.check_events(events)
    assert report.problems == [] and report.problem_count == 0
    return report


def test_empty_trace_is_valid_and_holds_the_summary():
    s = Summary(libraries=["/lib/libcudart.so.13"])
    s.lost = {"ringbuf_full": 3, "wakeups": 9}
    events = render(summary=s)
    assert events == [{"name": "cudaprobe summary", "ph": "i", "s": "g", "ts": 0,
                       "args": s.to_dict()}]
    report = checked(events)
    assert report.summary["lost_total"] == 3 and report.tracks == {}


def test_one_complete_event_per_call_in_us_since_attach():
    malloc = call("cudaMalloc", 1000.5, 1042.0, args=(0x10, 4096))
    events = render([malloc])
    x = [e for e in events if e["ph"] == "X"]
    assert len(x) == 1
    assert x[0]["name"] == "cudaMalloc" and x[0]["cat"] == "runtime,memory"
    assert (x[0]["pid"], x[0]["tid"]) == (7, 8)
    assert x[0]["dur"] == 41.5
    assert abs(x[0]["ts"] - malloc.time_ms * 1000) <= 0.5  # the origin is attach, to the µs
    assert x[0]["args"] == {"devPtr": "0x0", "size": 4096, "ret": 0, "ret_name": "cudaSuccess",
                            "details": "devPtr=0x0 size=4.0 KiB"}
    # later calls keep ns precision relative to the first
    later = render([malloc, call("cudaMalloc", 2000.123, 2000.2)])
    ts = [e["ts"] for e in later if e["ph"] == "X"]
    assert round(ts[1] - ts[0], 3) == 999.623


def test_processes_and_threads_named_once_before_their_first_event():
    batches = [[call("cudaMalloc", 1, 2), call("cudaMalloc", 3, 4, tid=9, comm="worker")],
               [call("cudaMalloc", 5, 6), call("cudaMalloc", 7, 8, pid=10, tid=10, comm="other")],
               [call("cudaMalloc", 9, 10, tid=9, comm="worker")]]
    events = render(*batches)
    meta = [(e["name"], e["pid"], e["tid"], e["args"]["name"]) for e in events if e["ph"] == "M"]
    assert meta == [("process_name", 7, 8, "train"), ("thread_name", 7, 8, "train"),
                    ("thread_name", 7, 9, "worker"),
                    ("process_name", 10, 10, "other"), ("thread_name", 10, 10, "other")]
    first_use = {}
    for i, e in enumerate(events):
        first_use.setdefault((e.get("pid"), e.get("tid"), e["ph"] == "M"), i)
    for (pid, tid, is_meta), i in first_use.items():
        if not is_meta and pid is not None:
            assert first_use[(pid, tid, True)] < i
    report = checked(events)
    assert {t: s.slices for t, s in report.tracks.items()} == {(7, 8): 2, (7, 9): 2, (10, 10): 1}


def under(child, parent, depth=1):
    """`child` as CallOrder gives it: made inside `parent`, `depth` deep."""
    child.depth, child.parent = depth, parent.ts_ns
    return child


def test_runtime_to_driver_flows_where_nesting_shows_them():
    # in call order, as CallOrder gives them: the driver calls inside cudaMalloc after it
    malloc, alloc = call("cudaMalloc", 100, 200), call("cuMemAlloc_v2", 120, 150)
    batch = [
        call("cuMemAlloc_v2", 50, 60),  # before cudaMalloc: the program's own driver call
        malloc,
        under(alloc, malloc),
        under(call("cuCtxSynchronize", 125, 130), alloc, 2),  # made by cuMemAlloc_v2: no flow
        call("cuMemAlloc_v2", 110, 118, tid=9, comm="worker"),  # other thread: no flow
        under(call("cuCtxSynchronize", 160, 170), malloc),
        call("cudaLaunchKernel", 300, 400),  # nothing inside: no flow
    ]
    events = render(batch)
    report = checked(events)
    flows = [(name, src.name, src.start_ns, dst.name, dst.start_ns)
             for name, src, dst in report.flows]
    origin = events[[e["ph"] for e in events].index("X")]["ts"] * 1000 - 50_000
    at = lambda us: round(origin + us * 1000)  # noqa: E731
    assert sorted(flows, key=lambda f: f[4]) == [
        ("cudaMalloc -> cuMemAlloc_v2", "cudaMalloc", at(100), "cuMemAlloc_v2", at(120)),
        ("cudaMalloc -> cuCtxSynchronize", "cudaMalloc", at(100), "cuCtxSynchronize", at(160)),
    ]
    assert report.tracks[(7, 8)].flows_out == report.tracks[(7, 8)].flows_in == 2
    assert report.tracks[(7, 9)].flows_in == 0
    ids = [e["id"] for e in events if e["ph"] == "s"]
    assert sorted(ids) == sorted(e["id"] for e in events if e["ph"] == "f")
    assert len(set(ids)) == 2


def test_in_flight_calls_begin_and_never_end():
    done = call("cuCtxSynchronize", 20, 30)
    sync = call("cudaDeviceSynchronize", 10)
    s = Summary()
    s.add([done])
    s.in_flight = [sync]
    # the session reports a call still running before the calls made inside it
    events = render([sync], [under(done, sync)], summary=s)
    b = [e for e in events if e["ph"] == "B"]
    assert len(b) == 1 and "dur" not in b[0] and not [e for e in events if e["ph"] == "E"]
    assert b[0]["args"]["in_flight"] is True and "ret" not in b[0]["args"]
    running = call("cudaMalloc", 40, args=(0x7FFC0000, 64))
    b = next(e for e in render([running]) if e["ph"] == "B")
    assert b["args"]["devPtr"] is None  # not written yet: not read
    assert b["args"]["details"].startswith("devPtr=- size=64 B")
    report = checked(events)
    assert report.tracks[(7, 8)].in_flight == 1 and report.summary["in_flight"] == 1
    assert "the slices match it" in report.lines()[1]
    # a runtime call still running made the driver call that completed inside it
    assert [(src.name, dst.name) for _, src, dst in report.flows] == [
        ("cudaDeviceSynchronize", "cuCtxSynchronize")]


def test_names_with_quotes_and_brackets_are_escaped():
    name = 'void k<"a\\b">(int [2], char const*)\n{x}'
    launch = call("cudaLaunchKernel", 1, 2, comm='tr"a[i]n\\', args=(0x401000,),
                  symbolize=lambda pid, addr: name)
    events = render([launch])
    x = next(e for e in events if e["ph"] == "X")
    assert x["args"]["func_name"] == name
    assert x["name"] == name and x["args"]["call"] == "cudaLaunchKernel"  # short: whole
    meta = {e["name"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert meta == {"process_name": 'tr"a[i]n\\', "thread_name": 'tr"a[i]n\\'}
    checked(events)


def test_launch_slices_are_named_by_kernel_in_short_form():
    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1>)")
    launch = call("cudaLaunchKernel", 1, 2, args=(0x401000,), symbolize=lambda pid, addr: name)
    unnamed = call("cudaLaunchKernel", 3, 4, args=(0x402000,), symbolize=lambda pid, addr: None)
    x = [e for e in render([launch, unnamed]) if e["ph"] == "X"]
    assert x[0]["name"] == "at::native::vectorized_elementwise_kernel<…>"
    assert x[0]["args"]["func_name"] == name and x[0]["args"]["call"] == "cudaLaunchKernel"
    assert x[1]["name"] == "cudaLaunchKernel" and "call" not in x[1]["args"]


def test_streamed_before_finish_and_loadable_if_cut_short(tmp_path):
    buf = io.StringIO()
    r = REPORTERS["chrome"](buf)
    r.start()
    malloc = call("cudaMalloc", 0.5, 3)
    r.calls([malloc, under(call("cuMemAlloc_v2", 1, 2), malloc)])
    text = buf.getvalue()
    assert text.startswith("[\n") and "]" not in text.splitlines()[-1]
    path = tmp_path / "cut.chrome.json"
    path.write_text(text)  # as a killed cudaprobe leaves it
    events, terminated = chrome_check.load_events(str(path))
    assert not terminated and len(events) == 6  # 2 names, 2 slices, 1 flow start and end
    assert chrome_check.check_events(events).flows


def test_threads_kept_for_flows_are_bounded(monkeypatch):
    monkeypatch.setattr(chrome_reporter, "MAX_THREADS", 4)
    r = REPORTERS["chrome"](io.StringIO())
    r.start()
    for i in range(100):
        r.calls([call("cuMemAlloc_v2", 10 * i, 10 * i + 5, tid=i % 6)])
    assert len(r._tops) <= 4


def test_added_keys_do_not_hide_an_argument():
    names = {a.name for f in catalogue.FUNCTIONS for a in f.args}
    assert not names & set(chrome_reporter.RESULT_KEYS)


def test_chrome_format_from_its_extensions():
    assert choose_format(None, "run.chrome.json") == "chrome"
    assert choose_format(None, "/tmp/RUN.Perfetto.JSON") == "chrome"
    assert choose_format(None, "run.json") == "json"
    assert choose_format("chrome", "run.jsonl") == "chrome"


@pytest.mark.parametrize("events, problem", [
    ([{"ph": "X", "name": "a", "ts": 1, "pid": 1, "tid": 1}], "no dur"),
    ([{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}], "no process_name"),
    ([{"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": "p"}},
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "p"}},
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "p"}}],
     "given twice"),
    ([{"ph": "s", "name": "f", "cat": "c", "id": 1, "ts": 1, "pid": 1, "tid": 1}],
     "a start without an end"),
    ([{"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
      {"ph": "X", "name": "b", "ts": 5, "dur": 10, "pid": 1, "tid": 1}], "without nesting"),
    ([{"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
      {"ph": "s", "name": "f", "cat": "c", "id": 1, "ts": 1, "pid": 1, "tid": 1},
      {"ph": "f", "name": "f", "cat": "c", "id": 1, "ts": 11, "pid": 1, "tid": 1}],
     "binds to no slice at its end"),
])
def test_checker_finds_what_is_wrong(events, problem):
    report = chrome_check.check_events(events)
    assert any(problem in p for p in report.problems), report.problems
