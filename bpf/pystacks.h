/* Python stacks (--py-stacks): shared between bpf/pystacks.bpf.h and its
 * Python mirror in cudaprobe/probe/pyrecords.py (tests/unit/test_pystacks_layout.py
 * checks they agree). docs/pystacks.md explains the design. */
#ifndef CP_PYSTACKS_H
#define CP_PYSTACKS_H

#define CP_PY_MAX_FRAMES 32    /* frames kept per call, innermost first; deeper: CP_PY_CUT */
#define CP_PY_WALK_MAX (1 << 22) /* thread states walked to find the calling thread's:
				  * pid_max's ceiling, more than a process can have; with
				  * no may_goto (Linux < 6.9) the verifier follows each
				  * step, and CP_PY_WALK_BOUNDED is the most it is given */
#define CP_PY_WALK_BOUNDED 512
#define CP_PY_LEND_BOUNDED 32  /* without may_goto, the states the lenders' walk reads */
#define CP_PY_FRAME_WINDOW 128 /* bytes of a frame read at once (every field used is in it) */
#define CP_PY_STR_MAX 256      /* bytes of a file name kept (code points * kind) */
#define CP_PY_NAME_MAX 128     /* bytes of a function's name kept */
#define CP_PY_STR_SLACK 32     /* read past the ASCII header: a compact non-ASCII
				* string's data starts up to this much further */
#define CP_PY_TABLE_MAX 4096   /* bytes of a code object's line table kept */
#define CP_PY_CODE_WINDOW 144  /* bytes of a code object read at once: every field the
				* walk reads of it lies in them (the loader checks) */
#define CP_PY_LAYOUTS 8        /* interpreter versions the loader describes */
#define CP_PY_TSTATE_WINDOW 272 /* bytes of a thread state read at once by the lenders'
				 * walk: every field it reads lies in them (the loader checks) */

/* Side records: in the ring between the call records, told apart by their
 * first word, 0 where a call record has its (never 0) entry time. Always
 * longer than a whole event, so that the reader keeps their bytes. */
#define CP_SIDE_STACK 1
#define CP_SIDE_CODE 2
#define CP_SIDE_NODE 3   /* a struct cp_py_stack: PyTorch made an autograd node (node_seq) */

/* struct cp_py_stack.flags */
#define CP_PY_CUT 1      /* the stack was deeper than CP_PY_MAX_FRAMES */
/* A record with no frames says why the thread's stack was not read; the
 * probe sends none for a thread that has no Python thread state, or no frame */
#define CP_PY_LIST_CHANGED 2   /* the interpreter's thread list changed as it was walked */
#define CP_PY_TOO_MANY 4       /* the walk's bound came before the list's end */
/* Borrowed: the caller has no Python frame, and the frames are those of
 * another thread of the process that waits in a C call (struct cp_py_stack's
 * lender), chosen because */
#define CP_PY_HANDED 8         /* it woke the caller last (it handed the work over) */
#define CP_PY_ONLY 16          /* it is the only Python thread waiting in a C call */
/* ...or, with no frames: several wait, and none woke the caller last */
#define CP_PY_LENDERS_MANY 32
/* node_seq and node_thread hold an autograd node (PyTorch): for a call, the one
 * its thread evaluates in the backward pass; for CP_SIDE_NODE, the node made */
#define CP_PY_NODE 64
/* struct cp_py_stack.kinds[] */
#define CP_PY_CODE 0     /* a code object */
#define CP_PY_SHIM 1     /* the interpreter's own frame (FRAME_OWNED_BY_CSTACK): not shown */
#define CP_PY_NOT_CODE 2 /* its code is not a code object (type check): the stack is unreadable */

/* What the walk needs of one CPython version, filled by the loader from
 * cudaprobe/targets/pyoffsets.py (map `py_layouts`). Byte offsets; -1: none. */
struct cp_py_layout {
	__s32 runtime_interp_head;   /* _PyRuntimeState.interpreters.head */
	__s32 interp_threads_head;   /* PyInterpreterState: first thread state */
	__s32 tstate_next;
	__s32 tstate_thread_id;      /* native_thread_id (the tid), or thread_id (pthread_self) */
	__s32 tstate_frame;          /* the current frame, or (cframe_current_frame >= 0) a CFrame */
	__s32 cframe_current_frame;
	__s32 frame_code;
	__s32 frame_back;
	__s32 frame_instr;           /* f_lasti (int), or a pointer into the code object */
	__s32 frame_owner;           /* char; FRAME_OWNED_BY_CSTACK (3): a shim, skipped */
	__s32 code_firstlineno;
	__s32 code_filename;
	__s32 code_name;             /* co_qualname, or co_name before it */
	__s32 code_linetable;        /* co_linetable, or co_lnotab */
	__s32 unicode_ascii_size;    /* sizeof(PyASCIIObject): where ASCII data starts */
	__s32 bytes_sval;            /* offsetof(PyBytesObject, ob_sval) */
	__u32 thread_id_is_pthread;  /* thread_id holds pthread_self() (the fs base) */
	__u32 instr_is_pointer;      /* frame_instr is a pointer: kept as its offset in the code */
	__s32 tstate_interp;         /* PyThreadState.interp */
	__s32 tstate_id;             /* PyThreadState.id: unique, new ones larger, at the head */
	__s32 code_version;          /* co_version (3.12+): a count, new at each code object */
	__s32 unicode_compact_size;  /* sizeof(PyCompactUnicodeObject): where other data starts */
	/* whether a thread has released the GIL (borrowed stacks): */
	__s32 tstate_state;          /* PyThreadState.state (3.13+: 1 attached), or -1: */
	__s32 gil_in_runtime;        /* _PyRuntime.ceval.gil (up to 3.11), or -1: */
	__s32 gil_in_interp;         /* PyInterpreterState.ceval.gil, a pointer (3.12) */
	__s32 gil_last_holder;       /* struct _gil_runtime_state.last_holder, */
	__s32 gil_locked;            /* .locked: held by last_holder while locked */
};

/* A process running Python (map `py_procs`, by tgid): where its runtime and
 * the code type are, the layout of its version. `gen` names this image of the
 * process (an exec or a reused pid gets another): the code objects' key. */
#define CP_PY_UNKNOWN 0
#define CP_PY_FOUND 1
#define CP_PY_NONE 2   /* not a Python the loader described: no stacks, no more look-ups */
struct cp_py_proc {
	__u64 runtime;     /* address of _PyRuntime */
	__u64 code_type;   /* address of PyCode_Type */
	__u64 gen;
	__u32 layout;      /* index into py_layouts */
	__u32 status;
};

/* An interpreter executable (map `py_exes`, by the file's device and inode),
 * so that a process is found at its first call without the loader: the
 * runtime is in the executable (debug_at == 0), or in a shared libpython that
 * the dynamic linker's list (r_debug, whose address the executable's DT_DEBUG
 * entry holds) has at the base whose l_ld - l_addr == lib_dynamic. */
struct cp_py_exe_key {
	__u64 dev;   /* the kernel's encoding: major << 20 | minor */
	__u64 ino;
};
struct cp_py_exe {
	__u64 text_vaddr;   /* the lowest executable PT_LOAD's vaddr: mm->start_code - this = bias */
	__u64 debug_at;     /* vaddr of the DT_DEBUG entry's value in the executable, or 0 */
	__u64 lib_dynamic;  /* vaddr of libpython's _DYNAMIC */
	__u64 runtime;      /* vaddr of _PyRuntime (in the executable, or in libpython) */
	__u64 code_type;    /* vaddr of PyCode_Type, the same */
	__u32 layout;
	__u32 pad;
};

/* A frame: its code object, by address and identity. The identity tells a
 * code object from another that took its memory after it was freed: its
 * co_version (3.12+), a count CPython gives each new code object, below
 * 2^31; else (and when that count has run out) a hash of all the record
 * sends of it (file name, function name, first line, line table) with the
 * top bit set. (gen, code, ident) is the key of its code record. */
struct cp_py_frame {
	__u64 code;        /* PyCodeObject * */
	__u32 instr;       /* f_lasti, or (instr_is_pointer) the instruction's offset in the code */
	__u32 ident;
};

/* The Python stack of a call, sent at entry; joined with the call's record
 * by (tid, ts_ns). Not sent for a thread with no Python frame, unless it
 * borrows one (CP_PY_HANDED, CP_PY_ONLY) or several could lend theirs
 * (CP_PY_LENDERS_MANY). */
struct cp_py_stack {
	__u64 zero;
	__u32 kind;        /* CP_SIDE_STACK */
	__u32 tid;
	__u64 ts_ns;       /* the call's entry time, as its record has it */
	__u64 gen;
	__u32 pid;
	__u16 nframes;
	__u16 flags;       /* CP_PY_CUT, CP_PY_HANDED, CP_PY_ONLY; with no frames,
			    * CP_PY_LIST_CHANGED, CP_PY_TOO_MANY or CP_PY_LENDERS_MANY */
	__u32 lender;      /* borrowed: the lender's tid (0: not known, 3.9 and 3.10
			    * name a thread by pthread_self() alone) */
	__u32 lender_count; /* Python threads found waiting in a C call */
	__u64 node_seq;    /* CP_PY_NODE: the autograd node's sequence number */
	__u64 node_thread; /* ...and its forward thread, as PyTorch numbers threads (a call's) */
	__u8 kinds[CP_PY_MAX_FRAMES];   /* each frame's: CP_PY_CODE, CP_PY_SHIM, CP_PY_NOT_CODE */
	struct cp_py_frame frames[CP_PY_MAX_FRAMES];
};

/* PyTorch's autograd engine in a process (map `ag_procs`, by tgid, filled by
 * probe/autograd.py): where a Node keeps its sequence number and its forward
 * thread's id, which differ between libtorch versions. */
struct cp_ag_proc {
	__u32 seq_off;
	__u32 thread_off;
};

/* A code object's names and line table, sent the first time a process's
 * stacks hold it, by its address and identity (map `py_codes_seen`), so that
 * the stacks decode after the process has exited. Strings as CPython keeps
 * them: state and length (code points: a name longer than what is kept is
 * cut by the decoder, and marked), the bytes from its ASCII data on. */
struct cp_py_code {
	__u64 zero;
	__u32 kind;        /* CP_SIDE_CODE */
	__u32 pid;
	__u64 gen;
	__u64 code;
	__s32 firstlineno;
	__u32 table_len;   /* the table's whole length (bytes kept: at most CP_PY_TABLE_MAX) */
	__u32 layout;      /* the version's index in py_layouts: how to read the table */
	__u32 filename_state;
	__u64 filename_len;
	__u64 name_len;
	__u32 name_state;
	__u32 ident;       /* struct cp_py_frame.ident */
	char filename[CP_PY_STR_MAX + CP_PY_STR_SLACK];
	char name[CP_PY_NAME_MAX + CP_PY_STR_SLACK];
	__u8 table[CP_PY_TABLE_MAX];
};

#endif
