/* Python stacks (CP_PYSTACKS): at a call's entry, the calling thread's
 * CPython frames, walked from the interpreter's own structures and sent as
 * a side record (struct cp_py_stack) before the call's. docs/pystacks.md.
 *
 * The thread's PyThreadState is found in the interpreter's list by its
 * thread id, whether or not the thread holds the GIL (a CUDA call made by
 * C++ with the GIL released still has its Python frames in its state); it is
 * cached per thread and checked again at each call. The process's runtime is
 * found once per process: from `py_procs` (the loader, for --pid), or from
 * the executable's entry in `py_exes` and the process's own memory. */
#include "pystacks.h"

#ifndef CP_RINGBUF_PAGES
#error "pystacks.bpf.h goes with the trace program's ring buffer"
#endif
/* Settings: -D cflags from cudaprobe/probe/bpfprog.py. Kernel struct offsets
 * come from the running kernel's BTF (probe/kernel_btf.py): bcc's headers may
 * be another kernel's. */
#ifndef CP_MAX_PY_PROCS
#error "CP_MAX_PY_PROCS (capacity of `py_procs`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_PY_EXES
#error "CP_MAX_PY_EXES (capacity of `py_exes`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_PY_THREADS
#error "CP_MAX_PY_THREADS (capacity of `py_tstates`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_PY_CODES
#error "CP_MAX_PY_CODES (capacity of `py_codes_seen`) comes from bpfprog.py"
#endif
#ifndef CP_OFF_TASK_MM
#error "CP_OFF_TASK_MM (task_struct.mm) comes from bpfprog.py"
#endif
#ifndef CP_OFF_TASK_FSBASE
#error "CP_OFF_TASK_FSBASE (task_struct.thread.fsbase) comes from bpfprog.py"
#endif
#ifndef CP_OFF_MM_START_CODE
#error "CP_OFF_MM_START_CODE (mm_struct.start_code) comes from bpfprog.py"
#endif
#ifndef CP_OFF_MM_EXE_FILE
#error "CP_OFF_MM_EXE_FILE (mm_struct.exe_file) comes from bpfprog.py"
#endif
#ifndef CP_OFF_FILE_INODE
#error "CP_OFF_FILE_INODE (file.f_inode) comes from bpfprog.py"
#endif
#ifndef CP_OFF_INODE_INO
#error "CP_OFF_INODE_INO (inode.i_ino) comes from bpfprog.py"
#endif
#ifndef CP_OFF_INODE_SB
#error "CP_OFF_INODE_SB (inode.i_sb) comes from bpfprog.py"
#endif
#ifndef CP_OFF_SB_DEV
#error "CP_OFF_SB_DEV (super_block.s_dev) comes from bpfprog.py"
#endif

/* code objects whose record has been sent, by (gen, code, firstlineno) */
struct cp_py_code_key {
	u64 gen;
	u64 code;
	s64 firstlineno;
};

/* the interpreters' layouts (struct cp_py_layout), one per Python version,
 * filled by the loader */
BPF_ARRAY(py_layouts, struct cp_py_layout, CP_PY_LAYOUTS);
/* per process: its interpreter's runtime, found once (or CP_PY_NONE) */
BPF_TABLE("lru_hash", u32, struct cp_py_proc, py_procs, CP_MAX_PY_PROCS);
/* interpreters by executable (inode, device), filled by the loader */
BPF_HASH(py_exes, struct cp_py_exe_key, struct cp_py_exe, CP_MAX_PY_EXES);
/* the calling thread's PyThreadState, by pid_tgid: checked at each use */
BPF_TABLE("lru_hash", u64, u64, py_tstates, CP_MAX_PY_THREADS);
/* code objects whose record has been sent */
BPF_TABLE("lru_hash", struct cp_py_code_key, u8, py_codes_seen, CP_MAX_PY_CODES);

/* A process's image changes at exec; a pid is reused after exit: either way
 * its entry goes, and the next call finds the interpreter again. */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	py_procs.delete(&tgid);
	return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	py_tstates.delete(&pid_tgid);
	if (tgid == (u32)pid_tgid)
		py_procs.delete(&tgid);
	return 0;
}

static __always_inline u64 py_kread(u64 addr)
{
	u64 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline u64 py_read_u64(u64 addr)
{
	u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/* The base of libpython in this process: the dynamic linker's list of
 * objects, from r_debug (struct link_map: l_addr, l_name, l_ld, l_next). */
static __always_inline u64 py_lib_base(u64 debug_at, u64 lib_dynamic)
{
	u64 r_debug = py_read_u64(debug_at);
	if (!r_debug)
		return 0;
	u64 map = py_read_u64(r_debug + 8);	/* r_map */
	for (int i = 0; i < 64 && map; i++) {
		u64 l[4] = {};
		if (bpf_probe_read_user(l, sizeof(l), (void *)map))
			return 0;
		if (l[2] - l[0] == lib_dynamic)
			return l[0];
		map = l[3];
	}
	return 0;
}

/* The process's entry in py_procs, made at its first call from its executable
 * (CP_PY_NONE where that is not an interpreter described in py_exes). */
static __always_inline struct cp_py_proc *py_process(u32 tgid)
{
	struct cp_py_proc *p = py_procs.lookup(&tgid);
	if (p)
		return p;
	struct cp_py_proc found = {.status = CP_PY_NONE, .gen = bpf_ktime_get_ns()};
	u64 mm = py_kread(bpf_get_current_task() + CP_OFF_TASK_MM);
	u64 inode = py_kread(py_kread(mm + CP_OFF_MM_EXE_FILE) + CP_OFF_FILE_INODE);
	u32 dev = 0;
	bpf_probe_read_kernel(&dev, sizeof(dev),
			      (void *)(py_kread(inode + CP_OFF_INODE_SB) + CP_OFF_SB_DEV));
	struct cp_py_exe_key key = {.ino = py_kread(inode + CP_OFF_INODE_INO), .dev = dev};
	struct cp_py_exe *x = py_exes.lookup(&key);
	if (x) {
		u64 bias = py_kread(mm + CP_OFF_MM_START_CODE) - x->text_vaddr;
		u64 base = x->debug_at ? py_lib_base(bias + x->debug_at, x->lib_dynamic) : bias;
		if (base || !x->debug_at) {
			found.runtime = base + x->runtime;
			found.code_type = base + x->code_type;
			found.layout = x->layout;
			found.status = CP_PY_FOUND;
		}
	}
	py_procs.update(&tgid, &found);
	return py_procs.lookup(&tgid);
}

/* The thread's PyThreadState, 0 if it has none (a thread that never ran Python). */
static __always_inline u64 py_thread_state(struct cp_py_proc *p, struct cp_py_layout *L,
					   u64 pid_tgid)
{
	u64 want = (u32)pid_tgid;
	if (L->thread_id_is_pthread)	/* pthread_self(): the thread's fs base */
		want = py_kread(bpf_get_current_task() + CP_OFF_TASK_FSBASE);
	u64 *cached = py_tstates.lookup(&pid_tgid);
	if (cached && *cached && py_read_u64(*cached + L->tstate_thread_id) == want)
		return *cached;
	u64 interp = py_read_u64(p->runtime + L->runtime_interp_head);
	u64 ts = interp ? py_read_u64(interp + L->interp_threads_head) : 0;
	for (int i = 0; i < CP_PY_MAX_THREADS && ts; i++) {
		if (py_read_u64(ts + L->tstate_thread_id) == want) {
			py_tstates.update(&pid_tgid, &ts);
			return ts;
		}
		ts = py_read_u64(ts + L->tstate_next);
	}
	return 0;
}

/* First sight of a code object in this process image: send its record. A
 * record lost (ring full) is tried again at the next sight. */
static __always_inline int py_see_code(struct cp_py_proc *p, struct cp_py_layout *L, u64 code,
				       s32 firstlineno)
{
	struct cp_py_code_key key = {.gen = p->gen, .code = code, .firstlineno = firstlineno};
	u8 one = 1;
	if (py_codes_seen.lookup(&key))
		return 0;
	if (py_read_u64(code + 8) != p->code_type)	/* ob_type: freed, or not a code object */
		return CP_PY_NOT_CODE;
	struct cp_py_code *c = events.ringbuf_reserve(sizeof(struct cp_py_code));
	if (!c) {
		count(CP_LOST_RINGBUF);
		return 0;
	}
	c->zero = 0;
	c->kind = CP_SIDE_CODE;
	c->pid = bpf_get_current_pid_tgid() >> 32;
	c->gen = p->gen;
	c->code = code;
	c->firstlineno = firstlineno;
	c->layout = p->layout;
	c->pad = 0;
	u64 filename = py_read_u64(code + L->code_filename);
	u64 name = py_read_u64(code + L->code_name);
	u64 table = py_read_u64(code + L->code_linetable);
	c->filename_len = py_read_u64(filename + 16);	/* PyASCIIObject.length */
	c->name_len = py_read_u64(name + 16);
	c->filename_state = 0;
	c->name_state = 0;
	bpf_probe_read_user(&c->filename_state, 4, (void *)(filename + 32));	/* .state */
	bpf_probe_read_user(&c->name_state, 4, (void *)(name + 32));
	bpf_probe_read_user(c->filename, sizeof(c->filename),
			    (void *)(filename + L->unicode_ascii_size));
	bpf_probe_read_user(c->name, sizeof(c->name), (void *)(name + L->unicode_ascii_size));
	u64 n = py_read_u64(table + 16);	/* PyBytesObject.ob_size */
	c->table_len = n;
	if (n > CP_PY_TABLE_MAX)
		n = CP_PY_TABLE_MAX;
	asm volatile("" : "+r"(n));
	if (n > 0 && n <= CP_PY_TABLE_MAX)
		bpf_probe_read_user(c->table, n, (void *)(table + L->bytes_sval));
	events.ringbuf_submit(c, 0);
	py_codes_seen.update(&key, &one);
	return 0;
}

/* The calling thread's Python stack, sent as a side record with the entry
 * time it returns (the caller's call record gets the same time). */
static __always_inline u64 py_capture(u64 pid_tgid)
{
	struct cp_py_proc *p = py_process(pid_tgid >> 32);
	if (!p || p->status != CP_PY_FOUND)
		return bpf_ktime_get_ns();
	int idx = p->layout;
	struct cp_py_layout *L = py_layouts.lookup(&idx);
	if (!L)
		return bpf_ktime_get_ns();
	u64 ts = py_thread_state(p, L, pid_tgid);
	if (!ts)
		return bpf_ktime_get_ns();
	u64 frame = py_read_u64(ts + L->tstate_frame);
	if (L->cframe_current_frame >= 0 && frame)
		frame = py_read_u64(frame + L->cframe_current_frame);
	if (!frame)
		return bpf_ktime_get_ns();
	struct cp_py_stack *s = events.ringbuf_reserve(sizeof(struct cp_py_stack));
	if (!s) {
		count(CP_LOST_RINGBUF);
		return bpf_ktime_get_ns();
	}
	/* The frames, then their code objects: two loops whose iterations the
	 * verifier follows one way each. Their count goes through the record, not
	 * a register, so that the second loop is not followed once per count; a
	 * shim frame is kept, marked, and left out by the decoder. */
	u8 win[CP_PY_FRAME_WINDOW];
	s->nframes = 0;
	for (int i = 0; i < CP_PY_MAX_FRAMES; i++) {
		if (!frame || bpf_probe_read_user(win, sizeof(win), (void *)frame))
			break;
		struct cp_py_frame *f = &s->frames[i & (CP_PY_MAX_FRAMES - 1)];
		u64 code = *(u64 *)&win[L->frame_code & 0x78];
		u64 instr = *(u64 *)&win[L->frame_instr & 0x78];
		u8 owner = win[L->frame_owner & 0x7f];
		frame = *(u64 *)&win[L->frame_back & 0x78];
		f->code = code;
		f->instr = L->instr_is_pointer ? (u32)(instr - code) : (u32)instr;
		f->firstlineno = 0;
		f->kind = L->frame_owner >= 0 && owner == 3 ? CP_PY_SHIM : CP_PY_CODE;
		s->nframes = i + 1;
	}
	s->flags = frame ? CP_PY_CUT : 0;	/* frames left past the walk's bound */
	for (int i = 0; i < CP_PY_MAX_FRAMES; i++) {
		if (i >= s->nframes)
			break;
		struct cp_py_frame *f = &s->frames[i & (CP_PY_MAX_FRAMES - 1)];
		if (f->kind != CP_PY_CODE)
			continue;
		s32 firstlineno = 0;
		bpf_probe_read_user(&firstlineno, 4, (void *)(f->code + L->code_firstlineno));
		f->firstlineno = firstlineno;
		f->kind = py_see_code(p, L, f->code, firstlineno);
	}
	u64 now = bpf_ktime_get_ns();
	s->zero = 0;
	s->kind = CP_SIDE_STACK;
	s->tid = (u32)pid_tgid;
	s->ts_ns = now;
	s->gen = p->gen;
	s->pid = pid_tgid >> 32;
	if (s->nframes)
		events.ringbuf_submit(s, 0);
	else
		events.ringbuf_discard(s, 0);
	return now;
}
