# ruff: noqa: E501  (each meaning is one line of the documented table)
"""The row schema, written once: each key of a traced call's row, in order,
with its type and what it means. JSONL and JSON objects (output/jsonl.py)
and CSV columns (output/csv.py) have the keys every row has (JSONL_KEYS) in
this order; those an option adds come after them, where it adds them. The
table of the keys in docs/formats.md is made from it (output/formats.py's
schema_table, which a unit test compares with the page)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    """A line of the schema: keys said together (`pid`, `tid`), their type, and
    what they mean; `option` is the one that adds them (none: every row has them)."""
    names: tuple[str, ...]
    type: str
    meaning: str
    option: str | None = None


ROW_SCHEMA = (
    Key(('time_ms',), 'float', 'ms since the probes were attached'),
    Key(('ts_ns',), 'int', 'entry time, CLOCK_MONOTONIC ns'),
    Key(('pid', 'tid'), 'int', 'host pid namespace'),
    Key(('process',), 'string', "thread's comm (the kernel keeps 15 bytes): UTF-8, each byte that is not written `\\xNN`; a last character the kernel's cut left incomplete is dropped. The same text in every format and in Prometheus's `process` label"),
    Key(('event',), 'string', 'symbol as called, e.g. `cudaMemcpyAsync_ptsz`'),
    Key(('api',), 'string', '`runtime`, `driver` or `nccl`'),
    Key(('category',), 'string', 'one of the 26 of [events.md](events.md): `memory`, `transfer`, '
        '`kernel`, `stream`, `graph`, `vmm`, `collective`, ...'),
    Key(('duration_ns',), 'int or null', 'null: still in flight when the trace ended'),
    Key(('ret', 'ret_name'), 'int, string (or null)', '`cudaError_t` / `CUresult` / `ncclResult_t` and its name'),
    Key(('args',), 'object', "decoded arguments by their name in the CUDA headers: numbers as numbers, pointers and handles as hex strings, `kind` as `HostToDevice` etc., dim3 as `[x, y, z]`; out-parameters hold the value the call wrote (e.g. `devPtr` of cudaMalloc), `null` where it failed; NCCL calls add `bytes` (count x the datatype's size) and, for a communicator, `rank` and `nranks` (`null` where unknown: [nccl.md](nccl.md)); launches of both APIs add `func_name`, the demangled kernel name, whole however long (the table's DETAILS shortens it, `namespace::name<…>`; [driver.md](driver.md#kernel-names)); `cuModuleGetFunction`'s and `cuLibraryGetKernel`'s `name` is the string passed, whole (up to 8 KiB)"),
    Key(('details',), 'string', 'the DETAILS column'),
    Key(('depth',), 'int', "how deep in its thread's calls: 0 at the top, 1 for a call made inside a traced call (a driver call inside `cudaMalloc`), ..."),
    Key(('parent',), 'int or null', 'the `ts_ns` of the call it was made in (same `pid`, `tid`): a call is known by its `tid` and `ts_ns`; null at depth 0'),
    Key(('rank', 'world_size'), 'int, int or null', "only on the rows of a process that is one rank of a job (its runtime and driver calls too): the rank its launcher gave it (`RANK`/`WORLD_SIZE` as torchrun sets them, Open MPI's, PMI's), else the rank of the first communicator it made or used; absent where neither tells; CSV columns always, empty there ([nccl.md](nccl.md#many-ranks))", option='a launcher, or a communicator'),
    Key(('py_stack',), 'list', 'with `--py-stacks` only, on calls made by a thread running Python: `[{"file", "line", "function"}, ...]`, innermost first, as the interpreter\'s frames were at the call (`function`: the qualified name from 3.11 on); a frame whose file or function name was longer than what is kept has it cut, ending in `…`, and `"truncated": true`; on a call of a thread with no Python frame, the stack of the Python thread that waited for it in a C call, with `py_stack_borrowed: {"tid", "because"}`: whose (`tid`, null where not known) and why that thread (`because`: `handed`, it woke the calling thread last; `only`, the only Python thread waiting); absent where no Python thread waited; `py_stack_cut: true` where the stack was deeper than 32 frames; instead of it, `py_stack_missing` (a sentence) where the thread runs Python but its stack could not be read, or where several Python threads waited and none handed the work over ([pystacks.md](pystacks.md#borrowed-stacks))', option='--py-stacks'),
    Key(('py_stack_forward', 'autograd_node'), 'list, int', 'with `--py-stacks` only, on a call of PyTorch\'s backward pass (made while a thread evaluated an autograd node): the stack, as `py_stack`, of the forward op that made the node, so the line whose operation the call\'s work differentiates, and the node\'s sequence number (the one torch.profiler links forward and backward ops by); instead of the stack, `py_stack_forward_missing` (a sentence) where it is not known: the node was made before the trace began, it has no forward op (a leaf\'s gradient), or several threads numbered nodes alike; CSV: one column, `{"node", "stack"}` or `{"node", "missing"}` ([pystacks.md](pystacks.md#backward-on-its-forward-line))', option='--py-stacks'),
    Key(('gpu',), 'object', "with `--gpu-time` only, on calls that queued GPU work: `kind` (`kernel`, `memcpy`, `memset`), `start_ns` (CLOCK_MONOTONIC, as `ts_ns`), `duration_ns`, `device`, `stream`, `context` (CUPTI's ids); copies and memsets add `bytes`, copies `copy_kind` (`HtoD`, ...); a call that queued several (a graph launch) spans them, with `count` ([gputime.md](gputime.md))", option='--gpu-time'),
)

JSONL_KEYS = tuple(name for key in ROW_SCHEMA if key.option is None for name in key.names)
# after JSONL_KEYS where the call's process is a known rank of a job (decode/ranks.py)
RANK_KEYS = ("rank", "world_size")


def time_ms(ts_ns: int, t0_ns: int) -> float:
    """A row's `time_ms`: its call's start in ms since tracing began (t0_ns), to the µs."""
    return round((ts_ns - t0_ns) / 1e6, 3)


FAST_NS = 1 << 50  # time_ms_text's integers: below this, the float's error is under 0.2 ns
# each µs of a ms as repr() ends a float of 3 decimals: ".5" for 500, ".0" for 0
_FRACTIONS = tuple(f".{f:03d}".rstrip("0") if f else ".0" for f in range(1000))


def time_ms_text(since_ns: int) -> str:
    """repr(time_ms(t0_ns + since_ns, t0_ns)), the text JSONL and CSV write, in
    integers (round() with digits goes through a decimal string: twice as slow).
    It is the same: below 2**50 ns (13 days) `since_ns / 1e6` is off the exact
    quotient by under 0.2 ns, and round() rounds the float's exact value, so
    only a quotient that ends in exactly 500 ns (a tie) may go either way:
    those, times before t0 and later times take round(). The double nearest a
    number of ms with 3 decimals has that number as its shortest repr."""
    if 0 <= since_ns < FAST_NS and since_ns % 1000 != 500:
        us = (since_ns + 499) // 1000
        return f"{us // 1000}{_FRACTIONS[us % 1000]}"
    return repr(round(since_ns / 1e6, 3))
