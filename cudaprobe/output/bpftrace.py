"""Generate a bpftrace script that traces what `cudaprobe trace` would.

The script is built from the same probe plan (catalogue, selection, and the
symbols each library exports), as data: the columns come from COLUMNS, each
argument's text from its ArgKind (bpftrace_fields.py). Its layout follows
bpftrace's tools/*.bt: header comment, BEGIN banner, per-thread
`@start[tid, probe]` pairing deleted after use, END clean-up. It runs on
bpftrace 0.17 (Debian 12's) and newer; optional symbols a library lacks are
simply not emitted, as 0.17 has no `missing_probes` setting.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from cudaprobe import __version__
from cudaprobe.catalogue.enums import error_table
from cudaprobe.catalogue.functions import MAX_SLOTS, MEMCPY_KINDS, Arg, ArgKind, Function
from cudaprobe.errors import UsageError
from cudaprobe.output.bpftrace_fields import (
    CONFIG_WORDS,
    Field,
    arg_field,
    arg_words,
    entry_word,
    launch_config_slot,
)
from cudaprobe.probe.plan import Probe, ProbePlan

MIN_BPFTRACE = "0.17"
BPFTRACE_MAX_PROBES = 512  # bpftrace's default; more attach points need it raised

# api -> (name lookup map filled in BEGIN, names by return code)
ERROR_TABLES = {
    "runtime": ("@runtime_error", error_table("runtime")),
    "driver": ("@driver_error", error_table("driver")),
    "nccl": ("@nccl_error", error_table("nccl")),
}


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # of the header cell; 0 for the last, free-width column
    right: bool
    spec: str  # printf conversions in a row, `width` wide for usual values
    values: tuple[str, ...]  # bpftrace expressions for `spec`


# $begin_ns: the call's start (since tracing began), $lat_ns: its latency,
# $rc: its return code, $rc_unnamed: $rc when the table has no name for it,
# else 0, which %.0d prints as nothing (there is no sprintf in bpftrace).
# EVENT is written into each probe's format: a string argument costs stack.
COLUMNS = (
    Column("TIME(ms)", 10, True, "%6lu.%03lu", ("$begin_ns / 1000000", "$begin_ns / 1000 % 1000")),
    Column("PROCESS", 15, False, "%-15s", ("comm",)),
    Column("PID", 7, True, "%7d", ("pid",)),
    Column("TID", 7, True, "%7d", ("tid",)),
    Column("EVENT", 26, False, "", ()),
    Column("LAT(us)", 10, True, "%6lu.%03lu", ("$lat_ns / 1000", "$lat_ns % 1000")),
    Column("RESULT", 28, False, "%.0d%-28s", ("$rc_unnamed",)),  # and the name
    Column("DETAILS", 0, False, "", ()),
)
# script variables besides the arguments'
_RESERVED = {"a", "cfg", "begin_ns", "lat_ns", "rc", "rc_unnamed"}


@dataclass(frozen=True)
class ExportOptions:
    pids: tuple[int, ...] = ()  # only these processes; all when empty
    summary: bool = False
    command: str = "cudaprobe export bpftrace"  # recorded in the header


def quote_probe_path(path: str) -> str:
    """A library path as a quoted bpftrace attach target."""
    if any(c == "\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise UsageError(
            f"library path {path!r} has a backslash or control character, which bpftrace "
            "probe names cannot carry portably",
            fix="point --lib at a symlink to it without those characters",
        )
    if ":" in path:  # bpftrace 0.17 parses it quoted, then splits it there: no symbol found
        raise UsageError(
            f"library path {path!r} has a colon, which bpftrace cannot attach to "
            "(quoted or not)", fix="trace a copy of it in a directory without a colon (a symlink "
            "resolves back to it)")
    return '"' + path.replace('"', '\\"') + '"'


def _probe_specs(probe: Probe, paths: list[str], ret: bool) -> str:
    kind = "uretprobe" if ret else "uprobe"
    return ",\n".join(f"{kind}:{quote_probe_path(p)}:{probe.symbol}" for p in paths)


def _tuple(words: list[str], size: int) -> str:
    """A tuple of `size` uint64s: then one map holds every probe's words."""
    return "(" + ", ".join(words + ["(uint64)0"] * (size - len(words))) + ")"


def _entry(probe: Probe, paths: list[str], options: ExportOptions) -> list[str]:
    """At entry: the start time and the argument words, per thread and probe."""
    n, fn = probe.func_id, probe.function
    args = ", ".join(f"{a.name}: {a.kind.value}" for a in fn.args)
    lines = [f"// {fn.name}({args}) [{fn.api} {fn.category}]", _probe_specs(probe, paths, False)]
    if options.pids:
        lines.append("/" + " || ".join(f"pid == {p}" for p in options.pids) + "/")
    lines += ["{", f"\t@start[tid, {n}] = elapsed;"]
    words = arg_words(fn)
    if not options.summary and words:
        lines.append(f"\t@arg[tid, {n}] = {_tuple([entry_word(s) for _, s in words], MAX_SLOTS)};")
        if launch_config_slot(fn) >= 0:  # the struct and the string are the caller's: copy
            base = entry_word(launch_config_slot(fn))  # them now
            cfg = [f"*uptr((uint64 *)({base} + {8 * i}))" if i else f"*uptr((uint64 *){base})"
                   for i in range(CONFIG_WORDS)]
            lines.append(f"\t@cfg[tid, {n}] = {_tuple(cfg, CONFIG_WORDS)};")
        if copies_string(fn):
            lines.append(f"\t@str[tid, {n}] = str(uptr({entry_word(fn.string_slot)}));")
    return lines + ["}"]


# A string and more argument words than this pass the BPF stack's 512 bytes in
# bpftrace's code for the probe pair (cudaLibraryLoadFromFile): the string's
# address is printed instead.
STRING_MAX_WORDS = 4


def copies_string(fn: Function) -> bool:
    return fn.string_slot >= 0 and fn.words <= STRING_MAX_WORDS


def _row_printf(probe: Probe, table: str, fields: list[Field]) -> str:
    """One printf for the whole line: the output of separate printfs can interleave."""
    time, process, pid, tid, event, lat, result, _ = COLUMNS
    specs = [time.spec, process.spec, pid.spec, tid.spec, probe.symbol.ljust(event.width),
             lat.spec, result.spec if fields else "%.0d%s", *(f.fmt for f in fields)]
    values = [*time.values, *process.values, *pid.values, *tid.values, *lat.values,
              *result.values, f"{table}[$rc]", *(v for f in fields for v in f.values)]
    return f'printf("{" ".join(specs)}\\n", {", ".join(values)});'


def _map_key_string(text: str) -> str:
    """A string literal for a map key, NUL-padded to a multiple of 8 bytes:
    bpftrace 0.17 packs keys without alignment, and the verifier rejects the
    misaligned stores behind a string of another length."""
    return '"' + text + "\\0" * (-(len(text) + 1) % 8) + '"'


def _exit(probe: Probe, paths: list[str], options: ExportOptions) -> list[str]:
    """At return: pair with the entry, print the call (or count it), delete the entry."""
    n, fn, symbol = probe.func_id, probe.function, probe.symbol
    table = ERROR_TABLES[fn.api][0]
    body = [f"$begin_ns = @start[tid, {n}];", "$lat_ns = elapsed - $begin_ns;",
            "$rc = (int32)retval;"]
    words = arg_words(fn)
    if options.summary:
        key = _map_key_string(symbol)
        body += [f"@calls[{key}] = count();", f"@latency_ns[{key}] = hist($lat_ns);",
                 f"if ($rc != 0) {{ @errors[{key}, (int64)$rc, {table}[$rc]] = count(); }}"]
    else:
        body.append(f'$rc_unnamed = {table}[$rc] == "" ? $rc : 0;')
        if words:
            body.append(f"$a = @arg[tid, {n}];")
        for i, (var, _slot) in enumerate(words):
            if var in _RESERVED:
                raise ValueError(f"{fn.name}: argument {var!r} clashes with a script variable")
            body.append(f"${var} = $a.{i};")
        args = [a if a.kind is not ArgKind.CSTRING or copies_string(fn)
                else Arg(a.name, ArgKind.PTR) for a in fn.args]
        fields = [f for f in (arg_field(a, s, n) for a, s in zip(args, fn.slots))
                  if f is not None]
        body += [line for f in fields for line in f.setup]
        body.append(_row_printf(probe, table, fields))
        body += [f"delete({m}[tid, {n}]);" for m, used in (
            ("@arg", words), ("@cfg", launch_config_slot(fn) >= 0),
            ("@str", copies_string(fn))) if used]
    body.append(f"delete(@start[tid, {n}]);")
    return [_probe_specs(probe, paths, True), f"/@start[tid, {n}]/", "{",
            *("\t" + line for line in body), "}"]


_HEADER = string.Template("""\
#!/usr/bin/env bpftrace
/*
 * ${name}: ${what}.
 *
 * Generated by cudaprobe ${version} from its catalogue (export again rather
 * than edit it):
 *   ${command}
 *
 * Needs bpftrace ${min_version} or newer, and root. Usage:
 *   sudo ${env}bpftrace ${name}
 *   sudo ${env}bpftrace ${name} -c '/path/to/app args'
 *   sudo ${env}./${name}
 *
 * Libraries (${probes} probed symbols):
${libraries}
 *
 * ${legend}
 */
""")

_LINE_LEGEND = """\
One line per completed call. TIME(ms): when it started, since tracing
 * began; LAT(us): how long it took; RESULT: its return code's name (its
 * number where the CUDA 13 table has none); DETAILS: its arguments, sizes in
 * bytes, out-parameters as the call wrote them. A launch's func is its
 * kernel's name, from usym(), or its address where bpftrace cannot name it:
 * usym() reads /proc/PID/maps when the line is printed, which is too late
 * once the process has exited, and a CUDA 12+ driver passes a cudaKernel_t
 * handle that no symbol holds (its name is on the cuLibraryGetKernel line).
 * At exit bpftrace 0.17 prints two empty lines, and one more per map the
 * script used (cleared in END, so none prints its contents). Calls in
 * flight are kept per thread in @start and @arg, up to BPFTRACE_MAP_KEYS_MAX
 * (default 4096) at once."""

_SUMMARY_LEGEND = """\
Printed at exit: @calls per function, @latency_ns histograms per function,
 * and @errors by function, return code and its name."""


def _comment_safe(text: str) -> str:
    return text.replace("*/", "*\\/")


def _fill(template: string.Template, **values: str) -> str:
    """substitute(), failing with the name of any placeholder left unfilled."""
    try:
        return template.substitute(values)
    except KeyError as e:
        raise ValueError(f"bpftrace template placeholder {e} is not filled") from None


def _begin(probes: list[Probe], paths: dict[int, list[str]],
           options: ExportOptions) -> list[str]:
    fns = [p.function for p in probes]
    lines = ["BEGIN", "{"]
    for api in sorted({f.api for f in fns}):
        table, names = ERROR_TABLES[api]
        lines += [f'\t{table}[{code}] = "{name}";' for code, name in sorted(names.items())]
    if not options.summary and any(a.kind is ArgKind.MEMCPY_KIND for f in fns for a in f.args):
        lines += [f'\t@memcpy_kind[{v}] = "{n}";' for v, n in sorted(MEMCPY_KINDS.items())]
    libs = len({path for where in paths.values() for path in where})
    where = f" in pid {', '.join(map(str, options.pids))}" if options.pids else ""
    lines.append(f'\tprintf("Tracing {len(probes)} CUDA functions in {libs} '
                 f'{"library" if libs == 1 else "libraries"}{where}... Hit Ctrl-C to end.\\n");')
    if not options.summary:
        spec = " ".join(f"%{'' if c.right else '-'}{c.width}s" if c.width else "%s"
                        for c in COLUMNS)
        titles = ", ".join(f'"{c.title}"' for c in COLUMNS)
        lines.append(f'\tprintf("{spec}\\n", {titles});')
    return lines + ["}"]


def _filled_maps(fns: list[Function], options: ExportOptions) -> list[str]:
    """Every map the script fills but does not report: cleared in END, else
    bpftrace prints them at exit."""
    kinds = {a.kind for f in fns for a in f.args}
    maps = ["@start"]
    if not options.summary:
        maps += ["@arg"] if any(f.args for f in fns) else []
        maps += ["@cfg"] if any(launch_config_slot(f) >= 0 for f in fns) else []
        maps += ["@str"] if ArgKind.CSTRING in kinds else []
        maps += ["@memcpy_kind"] if ArgKind.MEMCPY_KIND in kinds else []
    return maps + [ERROR_TABLES[api][0] for api in sorted({f.api for f in fns})]


def _end(probes: list[Probe], options: ExportOptions) -> list[str]:
    fns = [p.function for p in probes]
    lines = ["END", "{"] + [f"\tclear({m});" for m in _filled_maps(fns, options)]
    if options.summary:
        lines.append('\tprintf("\\nCalls, latency (ns) and errors per function:\\n");')
    return lines + ["}"]


def render_script(plan: ProbePlan, options: ExportOptions, name: str | None = None) -> str:
    """The whole bpftrace script for `plan`; `name` is what its usage lines call it."""
    name = name or "cuda_events.bt"
    paths: dict[int, list[str]] = {}
    for a in plan.attachments:
        paths.setdefault(a.probe.func_id, []).append(a.path)
    probes = [p for p in plan.probes if p.func_id in paths]
    attach_points = 2 * len(plan.attachments)
    env = f"BPFTRACE_MAX_PROBES={attach_points} " if attach_points > BPFTRACE_MAX_PROBES else ""
    what = ("CUDA API calls per function: counts, latency and errors"
            if options.summary else "CUDA API calls, one line per completed call")
    if options.pids:
        what += f" in pid {', '.join(map(str, options.pids))}"
    header = _fill(
        _HEADER, name=_comment_safe(name), what=what, version=__version__,
        command=_comment_safe(options.command), min_version=MIN_BPFTRACE, env=env,
        probes=str(len(probes)),
        libraries="\n".join(f" *   {_comment_safe(p)}"
                            for p in sorted({a.path for a in plan.attachments})),
        legend=_SUMMARY_LEGEND if options.summary else _LINE_LEGEND,
    )
    blocks = [_begin(probes, paths, options)]
    for probe in probes:
        blocks.append(_entry(probe, paths[probe.func_id], options))
        blocks.append(_exit(probe, paths[probe.func_id], options))
    blocks.append(_end(probes, options))
    return header + "\n" + "\n\n".join("\n".join(b) for b in blocks) + "\n"
