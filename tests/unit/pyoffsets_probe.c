/* offsetof() of what the Python stack probes read, from a CPython's own headers
 * (compiled by tests/unit/test_pyoffsets.py against each version found). */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_gil.h"
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif
#define P(name, expr) printf("%s=%ld\n", name, (long)(expr))
int main(void) {
  P("runtime_interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX >= 0x030b0000
  P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
  P("tstate_thread_id", offsetof(PyThreadState, native_thread_id));
#else
  P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
  P("tstate_thread_id", offsetof(PyThreadState, thread_id));
#endif
  P("tstate_next", offsetof(PyThreadState, next));
  P("tstate_interp", offsetof(PyThreadState, interp));
  P("tstate_id", offsetof(PyThreadState, id));
#if PY_VERSION_HEX >= 0x030c0000
  P("code_version", offsetof(PyCodeObject, co_version));
#else
  P("code_version", -1);
#endif
#if PY_VERSION_HEX >= 0x030d0000
  P("tstate_frame", offsetof(PyThreadState, current_frame));
  P("cframe_current_frame", -1);
  P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
  P("frame_back", offsetof(_PyInterpreterFrame, previous));
  P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
  P("frame_owner", offsetof(_PyInterpreterFrame, owner));
#elif PY_VERSION_HEX >= 0x030b0000
  P("tstate_frame", offsetof(PyThreadState, cframe));
  P("cframe_current_frame", offsetof(_PyCFrame, current_frame));
  P("frame_code", offsetof(_PyInterpreterFrame, f_code));
  P("frame_back", offsetof(_PyInterpreterFrame, previous));
  P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
  P("frame_owner", offsetof(_PyInterpreterFrame, owner));
#else
  P("tstate_frame", offsetof(PyThreadState, frame));
  P("cframe_current_frame", -1);
  P("frame_code", offsetof(PyFrameObject, f_code));
  P("frame_back", offsetof(PyFrameObject, f_back));
  P("frame_instr", offsetof(PyFrameObject, f_lasti));
  P("frame_owner", -1);
#endif
  P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  P("code_filename", offsetof(PyCodeObject, co_filename));
#if PY_VERSION_HEX >= 0x030b0000
  P("code_name", offsetof(PyCodeObject, co_qualname));
  P("code_linetable", offsetof(PyCodeObject, co_linetable));
  P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#elif PY_VERSION_HEX >= 0x030a0000
  P("code_name", offsetof(PyCodeObject, co_name));
  P("code_linetable", offsetof(PyCodeObject, co_linetable));
  P("code_adaptive", -1);
#else
  P("code_name", offsetof(PyCodeObject, co_name));
  P("code_linetable", offsetof(PyCodeObject, co_lnotab));
  P("code_adaptive", -1);
#endif
  P("unicode_ascii_size", sizeof(PyASCIIObject));
  P("unicode_compact_size", sizeof(PyCompactUnicodeObject));
  P("bytes_sval", offsetof(PyBytesObject, ob_sval));
  /* whether a thread has released the GIL (a blocking C call): 3.13 says so in
   * its thread state; before, the GIL says which state holds it */
#if PY_VERSION_HEX >= 0x030d0000
  P("tstate_state", offsetof(PyThreadState, state));
#else
  P("tstate_state", -1);
#endif
#if PY_VERSION_HEX >= 0x030c0000
  P("gil_in_runtime", -1);
  P("gil_in_interp", offsetof(PyInterpreterState, ceval.gil));
#else
  P("gil_in_runtime", offsetof(_PyRuntimeState, ceval.gil));
  P("gil_in_interp", -1);
#endif
  P("gil_last_holder", offsetof(struct _gil_runtime_state, last_holder));
  P("gil_locked", offsetof(struct _gil_runtime_state, locked));
  return 0;
}
