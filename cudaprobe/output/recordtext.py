"""A probe's arguments as JSON text and DETAILS, straight from its records:
what the JSONL and CSV reporters write per record (decode.records' row makers).

`compile_args_text` generates, once per probe, straight-line code from its
ArgFields rather than a loop over them: the loop, its lists and joins were
half the cost of a JSONL line. Each text is remembered by the record's words
it is made of (and the process, for a kernel's name), up to MEMO_MAX: rows
repeat a few argument tuples. The text is exactly what json.dumps writes of
the decoded Call (tests/unit/test_decoders.py checks it, byte for byte).
"""

from __future__ import annotations

import functools
import json
from json.encoder import encode_basestring_ascii as encode_basestring
from typing import Any, Callable

from cudaprobe.catalogue.functions import OUT_KINDS, ArgKind
from cudaprobe.decode.calls import (
    CONFIG_DECODERS,
    NOT_READ,
    WORD_DECODERS,
    _dim3_text,
    _dim3_value,
    _hex,
    config_text,
)
from cudaprobe.decode.records import DIM_MASK, ProbeDecoder, record_cfg
from cudaprobe.probe.event import CFG_WORDS, R_CFG, R_NOUTS, R_PID, R_TEXT

# texts remembered per probe, by the words they are made of: a trace repeats a
# few argument tuples (the same kernels, shapes and streams) in most of its rows
MEMO_MAX = 1 << 16

# JSON text in ASCII: a non-ASCII character (a short name's "…", a file name's)
# written as its \u escape. A row of one width throughout joins, encodes and
# writes several times faster than one with a single wider character in it.
encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True,
                          check_circular=False).encode

# kinds whose JSON value is a string: pointers and handles in hex, memcpy kind names
STRING_KINDS = {ArgKind.PTR, ArgKind.FUNC, ArgKind.CU_FUNCTION, ArgKind.STREAM, ArgKind.EVENT,
                ArgKind.HANDLE,
                ArgKind.OUT_PTR, ArgKind.OUT_HANDLE, ArgKind.MEMCPY_KIND}


def _json_list(value: list[int]) -> str:
    return "[" + ",".join(map(str, value)) + "]"


def _json_float(value: float | None) -> str:
    return "null" if value is None else repr(value)


# kind -> its JSON value as text, as json.dumps writes it (the kinds' values are
# ints, strings, lists of ints, or a float or None)
def _json_of(kind: ArgKind) -> Callable[[Any], str]:
    if kind is ArgKind.DIM3:
        return _json_list
    if kind is ArgKind.OUT_FLOAT:
        return _json_float
    if kind in STRING_KINDS:
        return encode_basestring
    return str  # SIZE, COUNT, INT, FLAGS, ...: ints


@functools.lru_cache(maxsize=4096)
def _dim3_texts(lo: int, hi: int) -> tuple[list[int], str, str]:
    """A dim3's JSON value, its DETAILS text and its JSON text."""
    value, text = _dim3_value(lo, hi)
    return value, text, _json_list(value)


@functools.lru_cache(maxsize=4096)
def _config_texts(kind: ArgKind, cfg: tuple[int, ...]) -> tuple[str, str]:
    """A launch config's fields as JSON text (each `,"key":value`, after the
    struct's address) and its DETAILS text."""
    fields = CONFIG_DECODERS[kind](cfg)
    return "".join(f",{encode_basestring(k)}:{encode(v)}" for k, v in fields.items()), \
        config_text(fields)


def _json_key(name: str, args: list[str]) -> str:
    """`"name":` as an args object spells it after the texts `args` has."""
    return (',' if args else '') + encode_basestring(name) + ':'


def _text_key(name: str, details: list[str]) -> str:
    return (' ' if details else '') + name + '='


def compile_args_text(probe: ProbeDecoder
                      ) -> tuple[Callable[[tuple], str], Callable[[tuple], tuple[str, str]]]:
    """(json_tail, json_details) of a probe whose arguments decode from its
    record alone (probe.simple): the args object and `,"details":` as JSONL
    writes them (json_tail, the line's object left open), or the pair of
    texts (json_details). A probe with out-parameters gets one test of
    the record's nouts and two returns: the out-parameters decoded, or all of
    them not read (NOT_READ, written as constants: null in `args`, `-` in
    details). Only repr()s of catalogue names and ints go into the source."""
    ns: dict[str, Any] = {"enc": encode_basestring}
    body, outs = [], []  # lines decoding the arguments, the out-parameters
    args, details = [], []  # each argument's text: out-parameters read
    args_unread, details_unread = [], []  # ... out-parameters not read
    dims = {f.name: f.index for f in probe.fields if f.kind is ArgKind.DIM}
    for k, f in enumerate(probe.fields):
        name, kind, index = f.name, f.kind, f.index
        if kind is ArgKind.DIM:  # gridDimX, Y, Z: one [x, y, z] at X, its text at Z
            stem = name[:-1]
            if name.endswith("X"):
                body.append(f"    d{stem} = [" + ", ".join(
                    f"rec[{dims[stem + axis]}] & {DIM_MASK}" for axis in "XYZ") + "]")
                args.append(f"{_json_key(stem, args)!r} + _json_list(d{stem})")
                args_unread.append(args[-1])
            elif name.endswith("Z"):
                details.append(f"{_text_key(stem, details)!r} + _dim3_text(d{stem})")
                details_unread.append(details[-1])
            continue
        json_key, text_key = _json_key(name, args), _text_key(name, details)
        if kind in CONFIG_DECODERS:  # its address, then the struct's fields (no `name=`)
            ns[f"c{k}"], ns["record_cfg"], ns["_hex"] = kind, record_cfg, _hex
            body.append(f"    cj{k}, ct{k} = _config_texts(c{k}, record_cfg(rec))")
            args.append(f"{json_key!r} + enc(_hex(rec[{index}])) + cj{k}")
            details.append(f"{(' ' if details else '')!r} + ct{k}")
            args_unread.append(args[-1])
            details_unread.append(details[-1])
            continue
        if kind is ArgKind.DIM3:  # (a few shapes, again and again: remembered)
            ns[f"w{k}"] = _dim3_texts
            body.append(f"    v{k}, t{k}, x{k} = w{k}(rec[{index}], rec[{index + 1}])")
        elif kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION):
            # a launch's host stub or a driver launch's handle, and its kernel's name
            ns[f"w{k}"] = WORD_DECODERS[kind]
            ns[f"n{k}_of"] = (probe.names.texts if kind is ArgKind.FUNC
                              else probe.names.handle_texts)
            body.append(f"    v{k}, t{k} = w{k}(rec[{index}])")
            body.append(f"    n{k} = n{k}_of(rec, rec[{index}])")
            body.append(f"    if n{k}:")
            body.append(f"        t{k} += n{k}[1]")
        else:
            ns[f"w{k}"] = WORD_DECODERS[kind]
            (outs if kind in OUT_KINDS else body).append(f"    v{k}, t{k} = w{k}(rec[{index}])")
        ns[f"j{k}"] = _json_of(kind)
        if kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION):  # `,"func_name":"..."` where named
            args.append(f"{json_key!r} + j{k}(v{k}) + (n{k}[0] if n{k} else '')")
        elif kind is ArgKind.DIM3:
            args.append(f"{json_key!r} + x{k}")
        else:
            args.append(f"{json_key!r} + j{k}(v{k})")
        details.append(f"{text_key!r} + t{k}")
        if kind in OUT_KINDS:
            args_unread.append(repr(json_key + encode(NOT_READ[0])))
            details_unread.append(repr(text_key + NOT_READ[1]))
        else:
            args_unread.append(args[-1])
            details_unread.append(details[-1])
    ns.update(_json_list=_json_list, _dim3_text=_dim3_text, _config_texts=_config_texts)
    details_key = repr(',"details":')

    def returns(arg_texts: list[str], detail_texts: list[str], indent: str) -> tuple[str, str]:
        args_text = " + ".join(["'{'", *arg_texts, "'}'"])
        details_text = " + ".join(detail_texts) or repr("")
        return (f"{indent}return {args_text} + {details_key} + enc({details_text})",
                f"{indent}return {args_text}, {details_text}")

    if outs:  # read at exit only when the call returned 0: the record's nouts says
        read = [f"    if rec[{R_NOUTS}]:", *("    " + line for line in outs)]
        tail_read, pair_read = returns(args, details, "        ")
        tail_unread, pair_unread = returns(args_unread, details_unread, "    ")
        tail = "\n".join([*read, tail_read, tail_unread])
        pair = "\n".join([*read, pair_read, pair_unread])
    else:
        tail, pair = returns(args, details, "    ")
    words = sorted({i for f in probe.fields
                    for i in ((f.index, f.index + 1) if f.kind is ArgKind.DIM3 else (f.index,))})
    named = [f.index for f in probe.fields if f.kind is ArgKind.FUNC]
    handles = [f.index for f in probe.fields if f.kind is ArgKind.CU_FUNCTION]
    # the words' span (a failed call's record ends before its out-parameters: cut
    # short); a handle's name as the handles have it now (they learn, and forget)
    configs = any(f.kind in CONFIG_DECODERS for f in probe.fields)
    key = ", ".join([f"rec[{words[0]}:{words[-1] + 1}]" if words else "()",
                     *([f"rec[{R_CFG}:{R_CFG + CFG_WORDS}]"] if configs else ()),
                     *([f"rec[{R_NOUTS}]"] if outs else ()),
                     *([f"rec[{R_PID}]"] if named or handles else ()),
                     *(f"handle_name(rec[{R_PID}], rec[{i}])" for i in handles)]) + ","
    # a text is remembered once every kernel name in it is known for good; a
    # record carrying a name (its text) goes the whole way, for the handles
    known = " and ".join(f"known(rec[{R_PID}], rec[{i}])" for i in named) or "True"
    named += handles
    ns.update(known=probe.names.known if named else None, R_TEXT=R_TEXT, MAX=MEMO_MAX,
              handle_name=probe.names.handle_name if handles else None)
    memo = []
    for name in ("json_tail", "json_details"):
        memo += [f"def {name}(rec, texts={{}}):",
                 f"    key = ({key})",
                 "    text = texts.get(key)",
                 *(["    if text is not None and (len(rec) <= R_TEXT or not rec[R_TEXT]):"]
                   if named else ["    if text is not None:"]),
                 "        return text",
                 f"    text = _{name}(rec)",
                 f"    if {known}:",
                 "        if len(texts) >= MAX:",
                 "            texts.clear()",
                 "        texts[key] = text",
                 "    return text"]
    exec("\n".join(["def _json_tail(rec):", *body, tail,  # noqa: S102
                     "def _json_details(rec):", *body, pair, *memo]), ns)
    return ns["json_tail"], ns["json_details"]
