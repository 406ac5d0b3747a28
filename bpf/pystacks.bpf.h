/* Python stacks (CP_PYSTACKS): at a call's entry, the calling thread's
 * CPython frames, walked from the interpreter's own structures and sent as
 * a side record (struct cp_py_stack) before the call's. docs/pystacks.md.
 *
 * The thread's PyThreadState is found in the interpreter's list by its
 * thread id, whether or not the thread holds the GIL (a CUDA call made by
 * C++ with the GIL released still has its Python frames in its state). The
 * list is walked to its end however long it is (with may_goto, Linux 6.9+),
 * and what the walk found is kept per thread: the state, checked at each call
 * to be the thread's still; or that the thread has none, until a thread state
 * is made. The process's runtime is found once per process: from `py_procs`
 * (the loader, for --pid), or from the executable's entry in `py_exes` and
 * the process's own memory.
 *
 * A code object's names and line table are sent once per process image, by
 * its address and identity (struct cp_py_frame): one that takes the memory
 * of another, freed, is sent again, never decoded with the other's names.
 *
 * A thread with no Python frame (a C++ thread, or one whose thread state has
 * none, as PyTorch's autograd device threads) borrows the stack of a Python
 * thread of its process that waits in a C call (has frames and has released
 * the GIL): the one that woke it last (it handed the work over), else the
 * only one waiting; where several wait and none woke it, none (py_lender). */
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
#ifndef CP_OFF_TASK_PID
#error "CP_OFF_TASK_PID (task_struct.pid) comes from bpfprog.py"
#endif
#ifndef CP_OFF_TASK_TGID
#error "CP_OFF_TASK_TGID (task_struct.tgid) comes from bpfprog.py"
#endif
#ifndef CP_OFF_TASK_FLAGS
#error "CP_OFF_TASK_FLAGS (task_struct.flags) comes from bpfprog.py"
#endif
#ifndef CP_OFF_REGS_ORIG_AX
#error "CP_OFF_REGS_ORIG_AX (pt_regs.orig_ax) comes from bpfprog.py"
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

#ifdef CP_MAY_GOTO
/* may_goto (Linux 6.9+), spelled in bytes for clang 14 as bpf_experimental.h's
 * cond_break is: the kernel ends a loop that runs too long, so the verifier
 * follows the loop's body once, not once per iteration, and a loop may run
 * as long as its data (every thread of a process) */
#define py_cond_break                                                          \
	({                                                                     \
		__label__ l_break, l_continue;                                 \
		asm volatile goto("1:.byte 0xe5; .byte 0;"                     \
				  ".long ((%l[l_break] - 1b - 8) / 8) & 0xffff;" \
				  ".short 0" :::: l_break);                    \
		goto l_continue;                                               \
	l_break:                                                               \
		break;                                                         \
	l_continue:;                                                           \
	})
#define CP_PY_WALK CP_PY_WALK_MAX
#define CP_PY_LEND_WALK CP_PY_WALK_MAX
#define py_within(i, n, most) ((i) < (n))
#else
/* Without it the verifier follows every iteration of a loop: the thread walk
 * is bounded (CP_PY_WALK_BOUNDED), and code objects are not hashed (that would
 * take it past its limit), so the loader gives only the versions whose code
 * objects carry a co_version (3.12+) */
#define py_cond_break
#define CP_PY_WALK CP_PY_WALK_BOUNDED
#define CP_PY_LEND_WALK CP_PY_LEND_BOUNDED	/* the lenders' walk: its body is longer */
#define py_within(i, n, most) ((i) < (n) && (i) < (most))
#endif

#define CP_PY_HASHED (1u << 31)
#define CP_PF_EXITING 0x4	/* task_struct.flags: the task is exiting (include/linux/sched.h) */	/* cp_py_frame.ident: a hash, not a co_version */

/* code objects whose record has been sent, by (gen, code, ident) */
struct cp_py_code_key {
	u64 gen;
	u64 code;
	u64 ident;
};

/* what the walk of the thread list found for a thread: its state; or (tstate
 * 0) that it had none when the head of the list had id head_id */
struct cp_py_thread {
	u64 tstate;
	u64 head_id;
};

/* What the lenders' walk found so far (py_lender), kept in memory, not in
 * registers: the verifier then has no exact count to follow the walk with,
 * and follows its body once or twice, not once per thread found */
struct cp_py_lend {
	u64 only;	/* the first waiting thread's innermost frame, and its tid */
	u64 only_tid;
	u64 handed;	/* the waker's, where it waits */
	u64 handed_tid;
	u32 count;	/* threads found waiting */
	u32 step;	/* the walk's count */
};

/* Per CPU: the first bytes of a code object (read at once, its fields taken
 * at offsets masked to the array: the loader gives none past the bytes read),
 * and a string or line table copied to be hashed, head and all, CP_PY_CHUNK
 * words at a time (a chunk more: the words from where its data ends to its
 * chunk's end are zeroed). */
#define CP_PY_CODE_MASK 0xff
#define CP_PY_CHUNK 8	/* words hashed an iteration */
#define CP_PY_CHUNKS (CP_PY_TABLE_MAX / 8 / CP_PY_CHUNK)
#define CP_PY_HEAD 80	/* where an object's data starts, at most: sizeof(PyCompactUnicodeObject) */
#define CP_PY_OFF_MASK 0x78	/* that offset, word-aligned, in bounds for the verifier */
#define CP_PY_SHORT 256	/* a line table's bytes read with its head */
#define CP_PY_WORDS 1024	/* a power of two, more than (CP_PY_HEAD + CP_PY_TABLE_MAX) / 8 */
#define CP_PY_TSTATE_MASK 0x1ff	/* CP_PY_TSTATE_WINDOW's bytes, masked in bounds */
struct cp_py_scratch {
	u8 code[CP_PY_CODE_MASK + 1 + 8];
	u64 w[CP_PY_WORDS + CP_PY_CHUNK];
	u32 chunk;	/* the hash loop's count, through memory (py_hash_copied) */
	u32 frame;	/* the frame loop's, the same (py_capture) */
	u32 step;	/* the thread walk's (py_thread_state) */
	struct cp_py_lend lend;	/* the lenders' walk's findings (py_lender) */
	struct cp_py_code_key key;	/* py_see_code's, off the stack */
	u8 frame_win[CP_PY_FRAME_WINDOW];	/* a frame, read at once (py_capture) */
	u8 ts_win[CP_PY_TSTATE_MASK + 1 + 8];	/* a thread state's first bytes (py_lender) */
};

/* the interpreters' layouts (struct cp_py_layout), one per Python version,
 * filled by the loader */
BPF_ARRAY(py_layouts, struct cp_py_layout, CP_PY_LAYOUTS);
/* per process: its interpreter's runtime, found once (or CP_PY_NONE) */
BPF_TABLE("lru_hash", u32, struct cp_py_proc, py_procs, CP_MAX_PY_PROCS);
/* interpreters by executable (inode, device), filled by the loader */
BPF_HASH(py_exes, struct cp_py_exe_key, struct cp_py_exe, CP_MAX_PY_EXES);
/* what the walk found of the calling thread, by pid_tgid: checked at each use */
BPF_TABLE("lru_hash", u64, struct cp_py_thread, py_tstates, CP_MAX_PY_THREADS);
/* code objects whose record has been sent */
BPF_TABLE("lru_hash", struct cp_py_code_key, u8, py_codes_seen, CP_MAX_PY_CODES);
/* per CPU: a code object's first bytes, what its identity is hashed from */
BPF_PERCPU_ARRAY(py_scratch, struct cp_py_scratch, 1);

#ifdef CP_PY_WAKERS	/* Linux 5.15+ (bpf_task_pt_regs): bpfprog.py says */
/* Who woke a thread of a Python process last (sched_waking, and
 * sched_wakeup_new for a thread just made), among the threads of the same
 * process: a wakeup from another process or from an interrupt (a disk read
 * done, a timer) hands no work over, and does not replace it. A thread with
 * no Python frame borrows the stack of a waiting Python thread that woke it:
 * it handed the work over. */
struct cp_py_waker {
	u32 tid;	/* the waker */
	u32 pad;
	u64 fsbase;	/* its pthread_self(): 3.9 and 3.10 name a thread state's thread by it */
};
BPF_TABLE("lru_hash", u32, struct cp_py_waker, py_wakers, CP_MAX_PY_THREADS);
/* the wakers that live, by tid: their pthread_self(). A waker that has exited
 * lends nothing: its pthread_self() (its stack's address) is given to the
 * next thread made, which did not wake anyone */
BPF_TABLE("lru_hash", u32, u64, py_wakers_alive, CP_MAX_PY_THREADS);
#endif

/* A process's image changes at exec; a pid is reused after exit: either way
 * its entry goes, and the next call finds the interpreter again. */
static __always_inline void py_exec(u32 tgid)	/* from pairing.bpf.h's exec tracepoint */
{
	py_procs.delete(&tgid);
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32, tid = pid_tgid;
	py_tstates.delete(&pid_tgid);
#ifdef CP_PY_WAKERS
	py_wakers.delete(&tid);
	py_wakers_alive.delete(&tid);
#endif
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

#ifdef CP_PY_WAKERS
/* A thread is woken: kept where the waker is another thread of its process,
 * in a system call (a futex wake, a write, a clone: the registers saved at
 * its kernel entry hold the call's number, not an interrupt's vector), not
 * exiting, and the probe has found that process's interpreter (py_procs, at
 * its first call). A wakeup from an interrupt (a timer, a disk read done) is
 * made in the context of whatever thread it interrupted, and is no
 * hand-over: it is told only where that thread was running its own code
 * (docs/pystacks.md says the rest). Any other wakeup of the machine costs
 * two reads and a compare. */
static __always_inline int py_woken(u64 task)
{
	u32 tgid = 0, tid = 0;
	u64 me = bpf_get_current_pid_tgid();
	bpf_probe_read_kernel(&tgid, sizeof(tgid), (void *)(task + CP_OFF_TASK_TGID));
	bpf_probe_read_kernel(&tid, sizeof(tid), (void *)(task + CP_OFF_TASK_PID));
	if (me >> 32 != tgid || (u32)me == tid)
		return 0;
	u64 regs = bpf_task_pt_regs(bpf_get_current_task_btf());
	if ((s64)py_kread(regs + CP_OFF_REGS_ORIG_AX) < 0)	/* not in a system call */
		return 0;
	u64 current = bpf_get_current_task();
	u32 flags = 0;	/* an exiting thread wakes its joiner after its exit's tracepoint */
	bpf_probe_read_kernel(&flags, sizeof(flags), (void *)(current + CP_OFF_TASK_FLAGS));
	if (flags & CP_PF_EXITING)
		return 0;
	struct cp_py_proc *p = py_procs.lookup(&tgid);
	if (!p || p->status != CP_PY_FOUND)
		return 0;
	struct cp_py_waker w = {.tid = (u32)me, .fsbase = py_kread(current + CP_OFF_TASK_FSBASE)};
	py_wakers.update(&tid, &w);
	py_wakers_alive.update(&w.tid, &w.fsbase);
	return 0;
}

RAW_TRACEPOINT_PROBE(sched_waking)	/* in the waker's context: current is the waker */
{
	return py_woken(ctx->args[0]);
}

RAW_TRACEPOINT_PROBE(sched_wakeup_new)	/* a thread made: by its maker, current */
{
	return py_woken(ctx->args[0]);
}
#endif

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

/* The thread's PyThreadState; 0 if it has none (a thread that never ran
 * Python), or if it could not be told, *why then saying why. */
static __always_inline u64 py_thread_state(struct cp_py_proc *p, struct cp_py_layout *L,
					   struct cp_py_scratch *b, u64 pid_tgid, u16 *why)
{
	u64 want = (u32)pid_tgid;
	if (L->thread_id_is_pthread)	/* pthread_self(): the thread's fs base */
		want = py_kread(bpf_get_current_task() + CP_OFF_TASK_FSBASE);
	struct cp_py_thread *known = py_tstates.lookup(&pid_tgid);
	if (known && known->tstate && py_read_u64(known->tstate + L->tstate_thread_id) == want)
		return known->tstate;
	u64 interp = py_read_u64(p->runtime + L->runtime_interp_head);
	u64 ts = interp ? py_read_u64(interp + L->interp_threads_head) : 0;
	if (!ts)
		return 0;
	u64 head_id = py_read_u64(ts + L->tstate_id);
	if (known && !known->tstate && known->head_id == head_id)
		return 0;	/* none, and no thread state made since the walk that said so */
	/* A thread state is made at the head of the list with the next id, so the
	 * ids go down along it: a step where they do not, or to a state of
	 * another interpreter, or that cannot be read, is one taken while the
	 * list changed (a state removed as it was read). */
	u64 last = ~0ULL;
	int changed = 0;
	volatile u32 *through = &b->step;	/* no exact count: as py_hash_copied's */
	*through = 0;
	for (u64 i = *through; i < CP_PY_WALK && ts; i++) {
		py_cond_break;
		u64 id = 0, owner = 0, tid = 0;
		if (bpf_probe_read_user(&id, sizeof(id), (void *)(ts + L->tstate_id)) ||
		    bpf_probe_read_user(&owner, sizeof(owner), (void *)(ts + L->tstate_interp)) ||
		    bpf_probe_read_user(&tid, sizeof(tid), (void *)(ts + L->tstate_thread_id)) ||
		    id >= last || owner != interp) {
			changed = 1;
			break;
		}
		if (tid == want) {
			struct cp_py_thread found = {.tstate = ts};
			py_tstates.update(&pid_tgid, &found);
			return ts;
		}
		last = id;
		if (bpf_probe_read_user(&ts, sizeof(ts), (void *)(ts + L->tstate_next))) {
			changed = 1;
			break;
		}
	}
	if (changed || ts) {	/* not to the end: the next call walks again */
		*why = changed ? CP_PY_LIST_CHANGED : CP_PY_TOO_MANY;
		return 0;
	}
	struct cp_py_thread none = {.head_id = head_id};
	py_tstates.update(&pid_tgid, &none);
	return 0;
}

/* A field of the code object read into b->code */
static __always_inline u64 py_code_u64(struct cp_py_scratch *b, s32 off)
{
	return *(u64 *)&b->code[off & CP_PY_CODE_MASK];
}

static __always_inline u32 py_code_u32(struct cp_py_scratch *b, s32 off)
{
	return *(u32 *)&b->code[off & CP_PY_CODE_MASK];
}

static __always_inline u64 py_mix(u64 h, u64 v)
{
	h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 29);
}

/* The `n` bytes copied into b->w from its word `first` on (n at most
 * CP_PY_TABLE_MAX), and their count, into the hash h; only the copy's own
 * bytes count: the rest of its last word, and the words to its last chunk's
 * end, are zeroed first. The count of chunks starts from memory, and each
 * chunk's index goes through it: the verifier then has no exact value for
 * either, and with may_goto follows the loop's body once or twice, not once
 * a chunk (an index used as an offset would need its exact value, and so
 * would the count it came from). */
static __always_inline u64 py_hash_copied(struct cp_py_scratch *b, u64 h, u32 first, u64 n)
{
	h = py_mix(h, n);
	if (n == 0 || n > CP_PY_TABLE_MAX)
		return h;
	u32 end = (first + (n >> 3)) & (CP_PY_WORDS - 1);
	b->w[end] &= (1ULL << ((n & 7) * 8)) - 1;
#pragma unroll
	for (int j = 1; j < CP_PY_CHUNK; j++)
		b->w[end + j] = 0;
	u64 chunks = (n + 8 * CP_PY_CHUNK - 1) / (8 * CP_PY_CHUNK);
	volatile u32 *through = &b->chunk;
	*through = 0;
	for (u64 i = *through; py_within(i, chunks, CP_PY_CHUNKS); i++) {
		py_cond_break;
		*through = i;
		u32 at = first + (*through & (CP_PY_CHUNKS - 1)) * CP_PY_CHUNK;
		u64 *w = &b->w[at & (CP_PY_WORDS - 1)];
#pragma unroll
		for (int j = 0; j < CP_PY_CHUNK; j++)
			h = (h ^ w[j]) * 0x9e3779b97f4a7c15ULL;	/* py_mix's step, less one */
		h ^= h >> 29;
	}
	return h;
}

/* The `n` bytes at obj + off into b->w at the same place, where the read of
 * the object's head and first bytes at once did not have them all */
static __always_inline int py_copy_rest(struct cp_py_scratch *b, u64 obj, u32 off, u64 n)
{
	off &= CP_PY_OFF_MASK;
	if (n > CP_PY_TABLE_MAX)
		n = CP_PY_TABLE_MAX;
	asm volatile("" : "+r"(n));
	return n > 0 && n <= CP_PY_TABLE_MAX &&
	       bpf_probe_read_user((u8 *)b->w + off, n, (void *)(obj + off));
}

/* A str object's kind and text (at most `max` bytes of it) into the hash h:
 * its head and text read at once (one read, not two: the probe pays for
 * each), or where that much is not mapped, its head, then its text. */
static __always_inline u64 py_hash_str(struct cp_py_scratch *b, struct cp_py_layout *L, u64 h,
				       u64 str, const u32 max)
{
	int whole = !bpf_probe_read_user(b->w, CP_PY_HEAD + max, (void *)str);
	if (!whole && bpf_probe_read_user(b->w, 40, (void *)str))	/* no str is shorter */
		return py_mix(h, 1);
	u32 form = (b->w[4] >> 2) & 0x1f;	/* state: kind, compact, ascii; not `interned` */
	u32 off = (form >> 4) & 1 ? L->unicode_ascii_size : L->unicode_compact_size;
	u64 n = b->w[2] * (form & 7);	/* length, in code points */
	if (n > max)
		n = max;
	if (!whole && py_copy_rest(b, str, off, n))
		return py_mix(h, 2);
	return py_hash_copied(b, py_mix(h, form), (off & CP_PY_OFF_MASK) >> 3, n);
}

/* A bytes object's bytes (the line table: at most CP_PY_TABLE_MAX of them)
 * into the hash h: its head and first CP_PY_SHORT bytes read at once, the
 * rest where there is more. */
static __always_inline u64 py_hash_table(struct cp_py_scratch *b, struct cp_py_layout *L, u64 h,
					 u64 table)
{
	int whole = !bpf_probe_read_user(b->w, CP_PY_HEAD + CP_PY_SHORT, (void *)table);
	if (!whole && bpf_probe_read_user(b->w, 32, (void *)table))	/* none is shorter */
		return py_mix(h, 1);
	u32 off = L->bytes_sval;
	u64 n = b->w[2];	/* ob_size */
	if (n > CP_PY_TABLE_MAX)
		n = CP_PY_TABLE_MAX;
	if ((!whole || n + off > CP_PY_HEAD + CP_PY_SHORT) && py_copy_rest(b, table, off, n))
		return py_mix(h, 2);
	return py_hash_copied(b, h, (off & CP_PY_OFF_MASK) >> 3, n);
}

/* A code object's identity where CPython gives none: a hash of what its
 * record sends (names, first line, line table), its top bit set. */
static __always_inline u32 py_hash_code(struct cp_py_scratch *b, struct cp_py_layout *L,
					s32 firstlineno, u64 filename, u64 name, u64 table)
{
	u64 h = py_mix(0xcbf29ce484222325ULL, (u32)firstlineno);
	h = py_hash_str(b, L, h, filename, CP_PY_STR_MAX + CP_PY_STR_SLACK);
	h = py_hash_str(b, L, h, name, CP_PY_NAME_MAX + CP_PY_STR_SLACK);
	h = py_hash_table(b, L, h, table);
	return (u32)(h ^ (h >> 32)) | CP_PY_HASHED;
}

/* A str object's text from `data` (its ASCII data) into dst: `size` bytes
 * at once, or where those run past the end of what is mapped (a short string
 * near the end of a mapping), the bytes its length needs at most (a
 * non-ASCII one's data is up to CP_PY_STR_SLACK further, 4 bytes a code
 * point at most); where neither can be read, its state is 0: the decoder
 * says the text was not read, never takes the zeros of a failed read for it. */
static __always_inline void py_read_text(char *dst, const u32 size, u64 data, u64 len,
					 u32 *state)
{
	if (!bpf_probe_read_user(dst, size, (void *)data))
		return;
	u64 n = len < size ? len * 4 + CP_PY_STR_SLACK : size;
	if (n > size)
		n = size;
	asm volatile("" : "+r"(n));
	if (n > 0 && n <= size && !bpf_probe_read_user(dst, n, (void *)data))
		return;
	*state = 0;
}

/* A frame's code object: checked to be one (else CP_PY_NOT_CODE), its
 * identity into the frame, and its record sent at its first sight in this
 * process image. A record lost (ring full) is tried again at the next sight. */
static __always_inline u8 py_see_code(struct cp_py_proc *p, struct cp_py_layout *L,
				      struct cp_py_frame *f, struct cp_py_scratch *b)
{
	u64 code = f->code;
	if (bpf_probe_read_user(b->code, CP_PY_CODE_WINDOW, (void *)code) ||
	    py_code_u64(b, 8) != p->code_type)	/* ob_type: freed, or not a code object */
		return CP_PY_NOT_CODE;
	s32 firstlineno = py_code_u32(b, L->code_firstlineno);
	u64 filename = py_code_u64(b, L->code_filename);
	u64 name = py_code_u64(b, L->code_name);
	u64 table = py_code_u64(b, L->code_linetable);
	u32 ident = L->code_version >= 0 ? py_code_u32(b, L->code_version) : 0;
	if (!ident || ident >= CP_PY_HASHED)	/* none, or CPython's count ran out */
#ifdef CP_MAY_GOTO
		ident = py_hash_code(b, L, firstlineno, filename, name, table);
#else
		return CP_PY_NOT_CODE;	/* it cannot be told from one before it */
#endif
	f->ident = ident;
	struct cp_py_code_key *key = &b->key;
	key->gen = p->gen;
	key->code = code;
	key->ident = ident;
	u8 one = 1;
	if (py_codes_seen.lookup(key))
		return CP_PY_CODE;
	struct cp_py_code *c = events.ringbuf_reserve(sizeof(struct cp_py_code));
	if (!c) {
		count(CP_LOST_RINGBUF);
		return CP_PY_CODE;
	}
	c->zero = 0;
	c->kind = CP_SIDE_CODE;
	c->pid = bpf_get_current_pid_tgid() >> 32;
	c->gen = p->gen;
	c->code = code;
	c->firstlineno = firstlineno;
	c->layout = p->layout;
	c->ident = ident;
	c->filename_len = py_read_u64(filename + 16);	/* PyASCIIObject.length */
	c->name_len = py_read_u64(name + 16);
	c->filename_state = 0;
	c->name_state = 0;
	bpf_probe_read_user(&c->filename_state, 4, (void *)(filename + 32));	/* .state */
	bpf_probe_read_user(&c->name_state, 4, (void *)(name + 32));
	py_read_text(c->filename, sizeof(c->filename), filename + L->unicode_ascii_size,
		     c->filename_len, &c->filename_state);
	py_read_text(c->name, sizeof(c->name), name + L->unicode_ascii_size, c->name_len,
		     &c->name_state);
	u64 n = py_read_u64(table + 16);	/* PyBytesObject.ob_size */
	c->table_len = n;
	if (n > CP_PY_TABLE_MAX)
		n = CP_PY_TABLE_MAX;
	asm volatile("" : "+r"(n));
	if (n > 0 && n <= CP_PY_TABLE_MAX)
		bpf_probe_read_user(c->table, n, (void *)(table + L->bytes_sval));
	events.ringbuf_submit(c, 0);
	py_codes_seen.update(key, &one);
	return CP_PY_CODE;
}

/* Whether thread state ts (its first bytes in b->ts_win) has released the GIL:
 * 3.13 says so in the state; before, a state holds the GIL where the GIL is
 * locked and it is its last holder (`gil`: the GIL's holder and lock words,
 * read once a walk). */
struct cp_py_gil {
	u64 holder;
	u32 locked;
};

static __always_inline int py_released(struct cp_py_layout *L, struct cp_py_scratch *b,
				       u64 ts, struct cp_py_gil *gil)
{
	if (L->tstate_state >= 0)
		return *(u32 *)&b->ts_win[L->tstate_state & (CP_PY_TSTATE_MASK & ~3)] != 1;
	return !(gil->locked && gil->holder == ts);
}

static __always_inline void py_read_gil(struct cp_py_layout *L, u64 runtime, u64 interp,
					struct cp_py_gil *gil)
{
	u64 at = 0;
	if (L->tstate_state >= 0)
		return;
	if (L->gil_in_runtime >= 0)
		at = runtime + L->gil_in_runtime;
	else if (L->gil_in_interp >= 0)
		at = py_read_u64(interp + L->gil_in_interp);
	gil->locked = 1;	/* unread: every state taken to hold it, none lends */
	gil->holder = 0;
	if (!at || bpf_probe_read_user(&gil->holder, sizeof(gil->holder),
				       (void *)(at + L->gil_last_holder)) ||
	    bpf_probe_read_user(&gil->locked, sizeof(gil->locked), (void *)(at + L->gil_locked)))
		gil->holder = ~0ULL;
}

/* A state's innermost frame: tstate_frame, through the CFrame where there is one */
static __always_inline u64 py_top_frame(struct cp_py_layout *L, u64 frame)
{
	if (L->cframe_current_frame >= 0 && frame)
		frame = py_read_u64(frame + L->cframe_current_frame);
	return frame;
}

/* For a thread with no Python frame: the innermost frame of the Python thread
 * of its process that lends it its stack, a thread that has frames and has
 * released the GIL (it waits in a C call): the one that woke the caller last
 * (*how CP_PY_HANDED), else the only one (CP_PY_ONLY); 0 where none waits,
 * or several and none woke it (*how CP_PY_LENDERS_MANY), or the list changed
 * as it was walked (CP_PY_LIST_CHANGED) or was longer than the walk
 * (CP_PY_TOO_MANY). *lender: its tid where told; *waiting: how many wait.
 * Each state is read at once, its first CP_PY_TSTATE_WINDOW bytes. */
static __always_inline u64 py_lender(struct cp_py_proc *p, struct cp_py_layout *L,
				     struct cp_py_scratch *b, u64 pid_tgid, u16 *how,
				     u32 *lender, u32 *waiting)
{
	u32 tid = pid_tgid;
	u64 waker = 0;
	u32 waker_tid = 0;
#ifdef CP_PY_WAKERS
	struct cp_py_waker *w = py_wakers.lookup(&tid);
	if (w) {	/* the waker, if it still lives as the thread it was */
		waker_tid = w->tid;
		u64 *alive = py_wakers_alive.lookup(&waker_tid);
		if (alive && *alive == w->fsbase)
			waker = L->thread_id_is_pthread ? w->fsbase : waker_tid;
	}
#else
	(void)tid;
#endif
	u64 interp = py_read_u64(p->runtime + L->runtime_interp_head);
	u64 ts = interp ? py_read_u64(interp + L->interp_threads_head) : 0;
	struct cp_py_gil gil = {};
	py_read_gil(L, p->runtime, interp, &gil);
	struct cp_py_lend *f = &b->lend;
	f->only = f->only_tid = f->handed = f->handed_tid = 0;
	f->count = 0;
	u64 last = ~0ULL;
	int changed = 0;
	u8 *win = b->ts_win;
	volatile u32 *through = &f->step;	/* as py_thread_state's */
	*through = 0;
	for (u64 i = *through; i < CP_PY_LEND_WALK && ts; i++) {
		py_cond_break;
		if (bpf_probe_read_user(win, CP_PY_TSTATE_WINDOW, (void *)ts)) {
			changed = 1;
			break;
		}
		u64 id = *(u64 *)&win[L->tstate_id & (CP_PY_TSTATE_MASK & ~7)];
		u64 owner = *(u64 *)&win[L->tstate_interp & (CP_PY_TSTATE_MASK & ~7)];
		u64 thread = *(u64 *)&win[L->tstate_thread_id & (CP_PY_TSTATE_MASK & ~7)];
		u64 frame = *(u64 *)&win[L->tstate_frame & (CP_PY_TSTATE_MASK & ~7)];
		u64 next = *(u64 *)&win[L->tstate_next & (CP_PY_TSTATE_MASK & ~7)];
		if (id >= last || owner != interp) {
			changed = 1;
			break;
		}
		if (frame && py_released(L, b, ts, &gil))
			frame = py_top_frame(L, frame);
		else
			frame = 0;
		if (frame) {
			u64 t = L->thread_id_is_pthread ? 0 : thread;
			if (!f->count++) {
				f->only = frame;
				f->only_tid = t;
			}
			if (waker && thread == waker) {
				f->handed = frame;
				f->handed_tid = t ? t : waker_tid;
			}
		}
		last = id;
		ts = next;
	}
	*waiting = f->count;
	if (changed || ts) {
		*how = changed ? CP_PY_LIST_CHANGED : CP_PY_TOO_MANY;
		return 0;
	}
	if (f->handed) {
		*how = CP_PY_HANDED;
		*lender = f->handed_tid;
		return f->handed;
	}
	if (f->count == 1) {
		*how = CP_PY_ONLY;
		*lender = f->only_tid;
		return f->only;
	}
	*how = f->count ? CP_PY_LENDERS_MANY : 0;
	return 0;
}

/* PyTorch's autograd (probe/autograd.py attaches these to libtorch, per
 * process). Forward: each node made (at::sequence_number::get_and_increment
 * returns its number) sends the making thread's stack as a CP_SIDE_NODE
 * record. Backward: a thread entering Engine::evaluate_function(.., Node *)
 * notes the node, with its stack pointer there; a call made deeper in the
 * stack than that is the node's work (the thread's calls carry the node),
 * and the note goes once the thread is at or above that point again (its
 * next node, the end of the graph, an exception handled). No return probe:
 * an exception thrown through a return probe's trampoline finds no unwind
 * information there, and would end the process. */
#define CP_AG_DEPTH 4	/* nested backward passes (reentrant checkpoints) followed */
struct cp_ag_thread {
	u64 seq[CP_AG_DEPTH];
	u64 thread[CP_AG_DEPTH];
	u64 sp[CP_AG_DEPTH];
	u32 depth;	/* notes held; more than CP_AG_DEPTH: the deepest are not kept */
	u32 pad;
};
BPF_HASH(ag_procs, u32, struct cp_ag_proc, CP_MAX_PY_PROCS);
BPF_TABLE("lru_hash", u64, struct cp_ag_thread, ag_threads, CP_MAX_PY_THREADS);

/* the notes of nodes whose evaluation is over: those not above `sp` */
static __always_inline void ag_unwind(struct cp_ag_thread *t, u64 sp)
{
#pragma unroll
	for (int i = 0; i < CP_AG_DEPTH + 1; i++) {
		u32 d = t->depth;
		if (d == 0)
			break;
		u64 k = d - 1;
		asm volatile("" : "+r"(k));
		k &= CP_AG_DEPTH - 1;
		if (d <= CP_AG_DEPTH && t->sp[k] > sp)
			break;
		t->depth = d - 1;
	}
}

/* the node the calling thread evaluates at stack pointer `sp`, if any */
static __always_inline int ag_node_of(u64 pid_tgid, u64 sp, u64 *seq, u64 *thread)
{
	struct cp_ag_thread *t = ag_threads.lookup(&pid_tgid);
	if (!t)
		return 0;
	u32 d = t->depth;
	if (d == 0 || d > CP_AG_DEPTH)
		return 0;
	u64 k = d - 1;
	asm volatile("" : "+r"(k));
	k &= CP_AG_DEPTH - 1;
	if (t->sp[k] <= sp)
		return 0;
	*seq = t->seq[k];
	*thread = t->thread[k];
	return 1;
}

/* The calling thread's Python stack, sent as a side record (`kind`) with the
 * entry time it returns (the caller's call record gets the same time); where
 * the thread's state could not be told, a record with no frames that says
 * why. `node`: node_seq and node_thread go with it (CP_PY_NODE). */
static __always_inline u64 py_capture_as(u64 pid_tgid, u32 kind, u16 node, u64 node_seq,
					 u64 node_thread)
{
	struct cp_py_proc *p = py_process(pid_tgid >> 32);
	if (!p || p->status != CP_PY_FOUND)
		return bpf_ktime_get_ns();
	int idx = p->layout;
	struct cp_py_layout *L = py_layouts.lookup(&idx);
	if (!L)
		return bpf_ktime_get_ns();
	int zero = 0;
	struct cp_py_scratch *b = py_scratch.lookup(&zero);
	if (!b)
		return bpf_ktime_get_ns();
	u16 why = 0, how = 0;
	u32 lender = 0, waiting = 0;
	u64 ts = py_thread_state(p, L, b, pid_tgid, &why);
	u64 frame = py_top_frame(L, ts ? py_read_u64(ts + L->tstate_frame) : 0);
	if (!frame && !why)	/* no frame of its own: a waiting thread's, if it lends one */
		frame = py_lender(p, L, b, pid_tgid, &how, &lender, &waiting);
	if (!frame && !why && !how && !node)
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
	u8 *win = b->frame_win;
	s->nframes = 0;
	for (int i = 0; i < CP_PY_MAX_FRAMES; i++) {
		if (!frame || bpf_probe_read_user(win, CP_PY_FRAME_WINDOW, (void *)frame))
			break;
		int k = i & (CP_PY_MAX_FRAMES - 1);
		struct cp_py_frame *f = &s->frames[k];
		u64 code = *(u64 *)&win[L->frame_code & 0x78];
		u64 instr = *(u64 *)&win[L->frame_instr & 0x78];
		u8 owner = win[L->frame_owner & 0x7f];
		frame = *(u64 *)&win[L->frame_back & 0x78];
		f->code = code;
		f->instr = L->instr_is_pointer ? (u32)(instr - code) : (u32)instr;
		f->ident = 0;
		s->kinds[k] = L->frame_owner >= 0 && owner == 3 ? CP_PY_SHIM : CP_PY_CODE;
		s->nframes = i + 1;
	}
	s->flags = why | how | node | (frame ? CP_PY_CUT : 0);	/* CUT: frames past the bound */
	s->node_seq = node_seq;
	s->node_thread = node_thread;
	s->lender = lender;
	s->lender_count = waiting;
	volatile u32 *through = &b->frame;	/* as py_hash_copied's chunks */
	*through = 0;
	for (u64 i = *through; py_within(i, s->nframes, CP_PY_MAX_FRAMES); i++) {
		py_cond_break;
		*through = i;
		u32 k = *through & (CP_PY_MAX_FRAMES - 1);
		if (s->kinds[k] == CP_PY_CODE)
			s->kinds[k] = py_see_code(p, L, &s->frames[k], b);
	}
	u64 now = bpf_ktime_get_ns();
	s->zero = 0;
	s->kind = kind;
	s->tid = (u32)pid_tgid;
	s->ts_ns = now;
	s->gen = p->gen;
	s->pid = pid_tgid >> 32;
	if (s->nframes || why || how || node)
		events.ringbuf_submit(s, 0);
	else
		events.ringbuf_discard(s, 0);
	return now;
}

/* A call's stack (CP_SIDE_STACK), with the autograd node its thread evaluates */
static __always_inline u64 py_capture(u64 pid_tgid, u64 sp)
{
	u64 seq = 0, thread = 0;
	u16 node = ag_node_of(pid_tgid, sp, &seq, &thread) ? CP_PY_NODE : 0;
	return py_capture_as(pid_tgid, CP_SIDE_STACK, node, seq, thread);
}

/* at::sequence_number::get_and_increment() returned: a node was made, its
 * number in the return register; the stack of the forward op that made it */
int cp_ag_made(struct pt_regs *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	if (current_phase() != CP_TRACING || !ag_procs.lookup(&tgid))
		return 0;	/* before the start or after the end: no record */
	py_capture_as(pid_tgid, CP_SIDE_NODE, CP_PY_NODE, PT_REGS_RC(ctx), 0);
	return 0;
}

/* Engine::evaluate_function(graph_task, Node *func, ...) entered: its node is
 * the third argument (`this` first) */
int cp_ag_enter(struct pt_regs *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	struct cp_ag_proc *p = ag_procs.lookup(&tgid);
	if (!p)
		return 0;
	u64 node = PT_REGS_PARM3(ctx), seq = 0, thread = 0;
	if (bpf_probe_read_user(&seq, sizeof(seq), (void *)(node + (p->seq_off & 0xff))) ||
	    bpf_probe_read_user(&thread, sizeof(thread), (void *)(node + (p->thread_off & 0xff))))
		return 0;
	struct cp_ag_thread *t = ag_threads.lookup(&pid_tgid);
	if (!t) {
		struct cp_ag_thread fresh = {};
		ag_threads.update(&pid_tgid, &fresh);
		t = ag_threads.lookup(&pid_tgid);
		if (!t)
			return 0;
	}
	u64 sp = PT_REGS_SP(ctx);
	ag_unwind(t, sp);
	u32 d = t->depth;
	if (d < CP_AG_DEPTH) {
		u64 k = d;
		asm volatile("" : "+r"(k));	/* masked in the register the store uses */
		k &= CP_AG_DEPTH - 1;
		t->seq[k] = seq;
		t->thread[k] = thread;
		t->sp[k] = sp;
	}
	if (d <= CP_AG_DEPTH)
		t->depth = d + 1;
	return 0;
}

/* The graph's end (GraphTask::mark_as_completed_and_run_post_processing) or an
 * exception handled (Engine::thread_on_exception), called where
 * evaluate_function was: the notes not above here are over */
int cp_ag_leave(struct pt_regs *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct cp_ag_thread *t = ag_threads.lookup(&pid_tgid);
	if (t)
		ag_unwind(t, PT_REGS_SP(ctx));
	return 0;
}
