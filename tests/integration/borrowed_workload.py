"""CUDA calls made by threads that run no Python (borrowed_pool.c, loaded
with ctypes), while the Python threads wait for them in C calls, or do not.
Prints one JSON line per case: {"case", "tid": the thread that made the
calls, "caller": the Python thread that waited, "stack": [[file, line,
function], ...] as the interpreter gives the caller's, innermost first}.

    python borrowed_workload.py LIBBORROWED LIBCUDART CALLS

Cases, in order: `worker` (a thread made for a ctypes call, joined),
`pool` (autograd's shape: a device thread with a thread state and no frame,
handed work by backward()), `only` (the main thread, the only one waiting
in a C call, did not wake the native thread: its timer did), `several`
(two Python threads and the main one wait in C calls, none hands the
native thread its work), `none` (the main thread runs Python, holding the
GIL, while the native thread calls).
"""

import ctypes
import json
import sys
import threading

pool = ctypes.CDLL(sys.argv[1])
cudart = ctypes.CDLL(sys.argv[2])
CALLS = int(sys.argv[3])


def function_name(code):
    return getattr(code, "co_qualname", code.co_name)  # 3.11+: the qualified name


def waited(case, fn, *args):
    """fn(*args), a C call that waits for the calls another thread makes; prints
    the stack it is made from."""
    frames = [[__file__, sys._getframe().f_lineno + 5, function_name(sys._getframe().f_code)]]
    f = sys._getframe(1)
    while f is not None:
        frames.append([f.f_code.co_filename, f.f_lineno, function_name(f.f_code)])
        f = f.f_back
    tid = fn(*args)  # the line of the call: f_lineno above + 5
    print(json.dumps({"case": case, "tid": tid, "caller": threading.get_native_id(),
                      "stack": frames}), flush=True)


def backward():
    waited("pool", pool.pool_backward, CALLS)


def main():
    cudart.cudaRuntimeGetVersion(ctypes.byref(ctypes.c_int()))  # the process's first call
    waited("worker", pool.worker_calls, CALLS)

    pool.pool_start()
    backward()
    pool.pool_stop()

    pool.native_start(1, CALLS)
    ctypes.c_int.in_dll(pool, "native_go").value = 1
    waited("only", pool.wait_in_c)
    pool.native_join()

    native = pool.native_start(2, CALLS)
    waiters = [threading.Thread(target=pool.wait_in_c) for _ in range(2)]
    for t in waiters:
        t.start()
    ctypes.c_int.in_dll(pool, "native_go").value = 1
    for t in waiters:
        t.join()
    pool.native_join()
    print(json.dumps({"case": "several", "tid": native}), flush=True)

    native = pool.native_start(0, CALLS)
    ctypes.c_int.in_dll(pool, "native_go").value = 1
    done = ctypes.c_int.in_dll(pool, "native_done")
    while not done.value:  # Python, the GIL held: no C call to wait in
        pass
    pool.native_join()
    print(json.dumps({"case": "none", "tid": native}), flush=True)


main()
