"""Run by test_pylines.py under each CPython: the line the interpreter itself
gives at every instruction of many code objects, with the raw table, as JSON."""

import asyncio.base_events
import dis
import json
import json.decoder
import sys
import types


def codes(module):
    stack = [v.__code__ for v in vars(module).values() if isinstance(v, types.FunctionType)]
    for cls in (v for v in vars(module).values() if isinstance(v, type)):
        stack += [f.__code__ for f in vars(cls).values() if isinstance(f, types.FunctionType)]
    while stack:
        code = stack.pop()
        yield code
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]


out = []
for code in [*codes(json.decoder), *codes(asyncio.base_events)]:
    if sys.version_info >= (3, 11):
        table, lines = code.co_linetable, [p[0] for p in code.co_positions()]
        pairs = list(enumerate(lines))  # code unit -> line
    elif sys.version_info >= (3, 10):
        table = code.co_linetable
        pairs = [(b // 2, line) for start, end, line in code.co_lines()
                 for b in range(start, end, 2)]
    else:
        table = code.co_lnotab
        starts = list(dis.findlinestarts(code))
        pairs = []
        for ins in dis.get_instructions(code):
            line = [ln for off, ln in starts if off <= ins.offset][-1]
            pairs.append((ins.offset, line))
    out.append({"first": code.co_firstlineno, "table": table.hex(), "lines": pairs})
print(json.dumps({"version": list(sys.version_info[:2]), "codes": out}))
