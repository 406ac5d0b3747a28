"""What a hostile user does to a Python stack reader: calls libcudart through
ctypes from code whose memory Python reuses, from the thread last in a long
list, and from code with very long names. For each call it prints the stack
the interpreter itself gives: one JSON line {"tid", "event", "stack":
[[file, line, function], ...], "code"} innermost first ("code": the address
and first line of the code object that made the call). Runs on CPython 3.9
and later.

    python pystack_hostile.py LIBCUDART cells|threads N|names

cells: code compiled, run and freed, one piece after another, so that each
  takes the memory of the one before: each with its own file name, then one
  file name with the call on another line each time, then a function of
  another name each time (all at line 1, where the first line is the key).
threads N: N threads wait on an event, so that CPython's list of threads
  has the main thread last, N+1st; the main thread calls, then the thread
  started first (Nth) and the one started last (1st), while all are alive
  (none ends before both have called).
names: a file name of 300 ASCII characters, one of 80 characters with an
  emoji, a function name of 200 characters and one of 100 CJK characters.
"""

import ctypes
import json
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])
version = ctypes.c_int()
out = []


def function_name(code):
    return getattr(code, "co_qualname", code.co_name)  # 3.11+: the qualified name


def cuda(fn, *args):
    """Make the call fn(*args), and note the stack it is made from."""
    frames = [[__file__, sys._getframe().f_lineno + 7, function_name(sys._getframe().f_code)]]
    f = sys._getframe(1)
    while f is not None:
        frames.append([f.f_code.co_filename, f.f_lineno, function_name(f.f_code)])
        f = f.f_back
    caller = sys._getframe(1).f_code
    caller = [id(caller), caller.co_firstlineno]
    result = fn(*args)  # the line of the call: f_lineno above + 7
    out.append({"tid": threading.get_native_id(), "event": fn.__name__, "stack": frames,
                "code": caller, "thread": threading.current_thread().name})
    return result


CELLS = 50
CALL = "cuda(lib.cudaRuntimeGetVersion, ctypes.byref(version))"


def run_cell(source, filename):
    """Compile, run and drop: nothing keeps the code objects after this."""
    exec(compile(source, filename, "exec"), {"cuda": cuda, "lib": lib, "ctypes": ctypes,
                                             "version": version})


def cells():
    for i in range(CELLS):
        run_cell(CALL + "\n", f"cell_{i}.py")
    for i in range(CELLS):
        run_cell("x = 1\n" * i + CALL + "\n", "<cell>")
    for i in range(CELLS):
        run_cell(f"def f_{i}():\n    {CALL}\nf_{i}()\n", "<cell>")


def threads():
    n = int(sys.argv[3])
    go = threading.Event()
    waiting, done = threading.Barrier(n + 1), threading.Barrier(n + 1)

    def wait(calls):
        waiting.wait()
        go.wait()
        if calls:
            cuda(lib.cudaDriverGetVersion, ctypes.byref(version))
        done.wait()  # none ends, and leaves the list, before both have called

    threading.stack_size(256 << 10)  # a thousand of them, and little memory
    workers = [threading.Thread(target=wait, args=(i in (0, n - 1),), name=f"worker-{i}")
               for i in range(n)]
    for t in workers:
        t.start()
    waiting.wait()  # all alive, in CPython's list before the main thread
    cuda(lib.cudaRuntimeGetVersion, ctypes.byref(version))
    go.set()
    done.wait()
    for t in workers:
        t.join()


def names():
    run_cell(CALL + "\n", "/tmp/" + "d" * 291 + ".py")
    run_cell(CALL + "\n", "/tmp/\N{SNAKE}" + "e" * 71 + ".py")
    long_function = "f" * 200
    run_cell(f"def {long_function}():\n    {CALL}\n{long_function}()\n", "long_name.py")
    cjk_function = "\u51fd" * 100
    run_cell(f"def {cjk_function}():\n    {CALL}\n{cjk_function}()\n", "cjk_name.py")


{"cells": cells, "threads": threads, "names": names}[sys.argv[2]]()
for record in out:
    print(json.dumps(record))
