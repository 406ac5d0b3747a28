// SPDX-License-Identifier: Apache-2.0
/*
 * cudaprobe trace (and memory, run, serve): entry/exit uprobes on CUDA API
 * functions. Entry keeps the call's arguments in its pairing entry
 * (pairing.bpf.h); exit counts the call in `tally` and copies its record into
 * the ring buffer `events`. docs/bpf.md explains the design: maps, pairing
 * slots, records, settings.
 */
#include <uapi/linux/ptrace.h>
#include "cudaprobe.h"

/* Settings of this program; pairing.bpf.h checks those every program needs.
 * -D cflags from cudaprobe/probe/bpfprog.py, which holds every default
 * (docs/bpf.md, "Settings"). Switches (CP_ERRORS_ONLY, CP_CALLER, ...) are
 * defined or not; numbers have no default here. */
#ifndef CP_RINGBUF_PAGES
#error "CP_RINGBUF_PAGES (ring buffer pages) comes from bpfprog.py"
#endif
#ifndef CP_WAKEUP_EVERY
#error "CP_WAKEUP_EVERY (records per forced wakeup) comes from bpfprog.py"
#endif
#ifndef CP_MAX_PROCS
#error "CP_MAX_PROCS (capacity of `seen_procs`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_SITES
#error "CP_MAX_SITES (capacity of `located`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_HANDLES
#error "CP_MAX_HANDLES (capacity of `handle_named`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_STACKS
#error "CP_MAX_STACKS (capacity of `stacks`) comes from bpfprog.py"
#endif

/* A kernel's host stub, a call site or a kernel handle, in one process */
struct cp_located_key {
	u32 tgid;
	u32 pad;
	u64 addr;
};

/* A record with a kernel name after the event (output_named) */
struct cp_named {
	struct cp_event e;
	char name[CP_NAME_MAX];
};

/* ---- maps (pairing.bpf.h declares those every program has) ---- */

/* completed calls, each the first cp_probe_cfg.size bytes of its event */
BPF_RINGBUF_OUTPUT(events, CP_RINGBUF_PAGES);
/* every call that returned, per probe: counted before the ring can drop it */
BPF_PERCPU_ARRAY(tally, struct cp_tally, CP_NR_PROBES);
/* records submitted on this CPU: every CP_WAKEUP_EVERY-th wakes the reader */
BPF_PERCPU_ARRAY(submitted, u64, 1);
/* processes that have had an event, for threads without a slot: the first
 * one wakes the reader at once, so that it reads /proc/PID/maps (kernel
 * names) while the process still runs */
BPF_TABLE("lru_hash", u32, u8, seen_procs, CP_MAX_PROCS);
/* host stubs (launches) and call sites (CP_CALLER) whose place in their
 * object a record has carried, per process (locate_site) */
BPF_TABLE("lru_hash", struct cp_located_key, u8, located, CP_MAX_SITES);
/* kernel handles whose name a record has carried, per process
 * (handle_name_at) */
BPF_TABLE("lru_hash", struct cp_located_key, u8, handle_named, CP_MAX_HANDLES);
/* scratch space of a named record, per CPU (output_named) */
BPF_PERCPU_ARRAY(named, struct cp_named, 1);
#ifdef CP_STACKS
/* build-id user stacks of the calls (struct cp_event's stack_id): each frame
 * resolved by the kernel to its object's build-id and a file offset, named
 * after the process has exited */
BPF_STACK_TRACE_BUILDID(stacks, CP_MAX_STACKS);
#endif

/* a pairing entry holds the whole event, filled at entry, completed at exit */
#define CP_ENTRY struct cp_trace_entry
#include "pairing.bpf.h"
#ifdef CP_PYSTACKS
#include "pystacks.bpf.h"	/* its maps, and py_capture() */
#endif

/* A thread claiming a slot takes its name there (task_rename keeps it up to
 * date), and its first record wakes the reader. */
static __always_inline void slot_claimed(struct cp_owner *o)
{
	bpf_get_current_comm(o->comm, sizeof(o->comm));
	o->wake = 1;
	o->outer_depth = 0;
}

/* The thread's name from its slot, as bpf_get_current_comm would give it, for
 * a fraction of the cost; 0 if task_rename is writing it right now, or if it
 * is empty (the loader's sweep, freeing the slot, zeroes it: a thread that
 * claims the slot during that write may see its copy lost). */
static __always_inline int owner_comm(struct cp_owner *o, struct cp_event *e)
{
	volatile u64 *seq = &o->comm_seq;
	u64 before = *seq;
	asm volatile("" ::: "memory");
	u64 *from = (u64 *)o->comm, *to = (u64 *)e->comm;
	to[0] = from[0];
	to[1] = from[1];
	asm volatile("" ::: "memory");
	return !(before & 1) && *seq == before && to[0];
}

/* A thread renamed (exec, prctl(PR_SET_NAME), a write to /proc/.../comm, by
 * itself or another thread): its slot's copy of the name follows. */
TRACEPOINT_PROBE(task, task_rename)
{
	u32 tid = args->pid;
	u32 slot = owner_slot(tid);
	struct cp_owner *o = owners.lookup(&slot);
	if (!o || (u32)o->pid_tgid != tid)
		return 0;
	__sync_fetch_and_add(&o->comm_seq, 1);	/* odd: being written */
	bpf_probe_read_kernel(o->comm, sizeof(o->comm), args->newcomm);
	__sync_fetch_and_add(&o->comm_seq, 1);
	return 0;
}

/* Where a launch's kernel is, and where a call was made. A host stub, or a
 * call site, is named from the object it is in, which /proc/PID/maps tells
 * only while the process lives. So the first launch of
 * each kernel (host-stub address) in a process, or with CP_CALLER the first
 * call from each call site, records the call site as the kernel's build-id
 * stack walk resolves it now: the object's build-id and the file offset of
 * the return address (on Linux >= 6.12 the walk from a function's entry
 * starts with the return address), and the address itself; a launch's stub
 * is in the same object, `func - caller` away. One lookup per call after that.
 *
 * "First" is the first record in the ring: the site is marked located only
 * once the record that carries it is in (mark_located, at exit). A call made
 * on another thread while the first one runs walks too, so no record without
 * the site can reach the reader before the one with it (a process gone by
 * then could not be named from its maps). A walk that fails still marks. */
#define CP_FRAME_TRIED (-1)	/* walked, nothing found: marks, is not sent */
static __always_inline void locate_site(struct pt_regs *ctx, struct cp_event *e, u64 addr)
{
	struct cp_frame *f = (struct cp_frame *)&e->cfg[CP_FRAME_WORD];
	f->status = 0;	/* the entry is reused: nothing recorded unless below */
	struct cp_located_key key = {.tgid = e->pid, .addr = addr};
	if (located.lookup(&key))
		return;
	bpf_probe_read_user(&f->caller, sizeof(f->caller), (void *)PT_REGS_SP(ctx));
	/* skip 1: frame 0 is the probed function itself */
	if (bpf_get_stack(ctx, f, 32, 1 | BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) < 32
	    || f->status <= 0)
		f->status = CP_FRAME_TRIED;
}

/* After the record of a call that walked (locate_site) is in the ring, or is
 * not to be sent: its site is located for every later call. `addr` as there. */
static __always_inline void mark_located(struct cp_event *e, u64 addr)
{
	if (((struct cp_frame *)&e->cfg[CP_FRAME_WORD])->status == 0)
		return;
	struct cp_located_key key = {.tgid = e->pid, .addr = addr};
	u8 one = 1;
	located.update(&key, &one);
}

/* probes whose records may carry a struct cp_frame: every one with CP_CALLER
 * (cudaprobe memory), else the launches */
#ifdef CP_CALLER
#define CP_LOCATES(cfg) 1
#else
#define CP_LOCATES(cfg) ((cfg)->func_slot >= 0)
#endif

/* Entry: what the probe captures (its cp_probe_cfg), into the pairing entry.
 * Only what the probe uses is written: no memset of the whole event. */
static __always_inline void begin_call(struct pt_regs *ctx, struct cp_event *e, u32 probe_id,
				       u64 pid_tgid, struct cp_owner *owner)
{
	int idx = probe_id;
	struct cp_probe_cfg *cfg = probes.lookup(&idx);
	if (!cfg)
		return;
	e->pid = pid_tgid >> 32;
	e->tid = (u32)pid_tgid;
	e->func_id = probe_id;
	e->nargs = cfg->nargs;
	e->nouts = cfg->nouts;
	/* all six: cheaper than a branch; words past nargs are overwritten by the
	 * out-parameters at exit, or not copied into the ring */
	e->words[0] = PT_REGS_PARM1(ctx);
	e->words[1] = PT_REGS_PARM2(ctx);
	e->words[2] = PT_REGS_PARM3(ctx);
	e->words[3] = PT_REGS_PARM4(ctx);
	e->words[4] = PT_REGS_PARM5(ctx);
	e->words[5] = PT_REGS_PARM6(ctx);
	/* stack arguments start above the return address */
	u32 nstack = cfg->nstack;
	if (nstack > CP_MAX_SLOTS - CP_REG_SLOTS)
		nstack = CP_MAX_SLOTS - CP_REG_SLOTS;
	if (nstack > 0)
		bpf_probe_read_user(&e->words[CP_REG_SLOTS], nstack * 8,
				    (void *)(PT_REGS_SP(ctx) + 8));
	s32 cfg_slot = cfg->cfg_slot;
	u32 cfg_len = cfg->cfg_len;
	if (cfg_len > CP_CONFIG_MAX)
		cfg_len = CP_CONFIG_MAX;
	if (cfg_slot >= 0 && cfg_slot < CP_MAX_SLOTS && cfg_len > 0)
		bpf_probe_read_user(e->cfg, cfg_len, (void *)(e->words[cfg_slot] + cfg->cfg_off));
	s32 str_slot = cfg->str_slot;	/* a kernel name, before the call makes its handle */
	if (str_slot >= 0 && str_slot < CP_MAX_SLOTS)
		bpf_probe_read_user_str(e->cfg, sizeof(e->cfg), (void *)e->words[str_slot]);
	if (!owner || !owner_comm(owner, e))
		bpf_get_current_comm(e->comm, sizeof(e->comm));
#if defined(CP_CALLER) && defined(CP_OUTER)
#error "CP_CALLER and CP_OUTER both use cp_event.caller"
#endif
#ifdef CP_CALLER
	/* at entry the return address is on top of the stack: the exact call
	 * site, which a frame-pointer walk from here would skip */
	bpf_probe_read_user(&e->caller, sizeof(e->caller), (void *)PT_REGS_SP(ctx));
	locate_site(ctx, e, e->caller);
#else
	s32 func_slot = cfg->func_slot;
	if (func_slot >= 0 && func_slot < CP_MAX_SLOTS)
		locate_site(ctx, e, e->words[func_slot]);
#endif
#ifdef CP_OUTER
	/* NCCL calls are the outermost layer: a call made while its thread is in
	 * one (a runtime call of NCCL's own, ncclBroadcast inside ncclBcast) says
	 * so, and the reader holds it for that call to adopt (decode/nesting.py).
	 * Threads without a slot are not followed: their calls are never held. */
	e->caller = owner && owner->outer_depth;
	if (owner && cfg->outer)
		owner->outer_depth++;
#endif
#ifdef CP_STACKS
	e->stack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#else
	e->stack_id = -1;
#endif
	/* last: the entry is complete. With the Python stack, sent first, a later
	 * entry time: the call's from then on */
#ifdef CP_PYSTACKS
	e->ts_ns = py_capture(pid_tgid, PT_REGS_SP(ctx));
#else
	e->ts_ns = bpf_ktime_get_ns();
#endif
}

/* A process's first record wakes the reader at once: a slot's thread's first
 * (its wake flag), or for threads without a slot their process's first. */
static __always_inline u64 wakeup_flag(u32 tgid, struct cp_owner *owner)
{
	u8 one = 1;
	if (owner && owner->wake) {
		owner->wake = 0;
		count(CP_WAKEUPS);
		return BPF_RB_FORCE_WAKEUP;
	}
	if (!owner && !seen_procs.lookup(&tgid)) {
		seen_procs.update(&tgid, &one);
		count(CP_WAKEUPS);
		return BPF_RB_FORCE_WAKEUP;
	}
	int zero = 0;
	u64 *n = submitted.lookup(&zero);
	if (n && ((*n)++ % CP_WAKEUP_EVERY) == CP_WAKEUP_EVERY - 1) {
		count(CP_WAKEUPS);
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* Out-parameters: read at exit, the call has written them; stored after the
 * argument words (slot s < nargs <= nargs + k: no pointer is overwritten). */
static __always_inline void read_outs(struct cp_event *e, u32 out8, u32 out4, u32 nargs)
{
	u32 k = nargs;
#pragma unroll
	for (int s = 0; s < CP_MAX_SLOTS; s++) {
		u32 bit = 1u << s;
		if (!((out8 | out4) & bit) || k >= CP_MAX_WORDS)
			continue;
		u64 v = 0;
		bpf_probe_read_user(&v, (out8 & bit) ? 8 : 4, (void *)e->words[s]);
		e->words[k++] = v;
	}
}

/* Kernel names whole. A name passed to cuModuleGetFunction or
 * cuLibraryGetKernel runs to kilobytes for C++ templates (PyTorch's): it is
 * read at exit, where the caller's string is still there, into a per-CPU
 * scratch record after a copy of the event, and both go into the ring as one
 * record of their length (the reader takes any record longer than an event
 * for one of these). The calls are rare: the copy's cost does not matter. */
static __always_inline long output_named(struct cp_event *e, u64 name_at, u64 flags)
{
	int zero = 0;
	struct cp_named *n = named.lookup(&zero);
	if (!n)
		return events.ringbuf_output(e, sizeof(*e), flags);
	bpf_probe_read_kernel(&n->e, sizeof(n->e), e);
	long len = bpf_probe_read_user_str(n->name, sizeof(n->name), (void *)name_at);
	u64 size = sizeof(n->e) + (len > 0 ? len : 0);
	if (size > sizeof(*n))
		size = sizeof(*n);
	asm volatile("" : "+r"(size));
	return events.ringbuf_output(n, size, flags);
}

/* Launches of a kernel handle made before the attach (PyTorch's are made
 * when its libraries load) are named from the driver's object: the first
 * successful launch of each handle in a process sends, as a named record, the
 * string at the pointer the handle's object holds (CP_HANDLE_NAME_OFFSET),
 * while the process lives. The loader keeps it if it is an identifier (a
 * host stub's bytes are not). One LRU lookup per launch after that. */
static __always_inline u64 handle_name_at(u32 tgid, u64 handle, u8 *tried)
{
	struct cp_located_key key = {.tgid = tgid, .addr = handle};
	u64 at = 0;
	if (!handle || handle_named.lookup(&key))
		return 0;
	*tried = 1;
	bpf_probe_read_user(&at, sizeof(at), (void *)(handle + CP_HANDLE_NAME_OFFSET));
	return at;
}

/* Marked as named once the record with the name is in the ring, as sites are
 * (locate_site): a launch on another thread meanwhile sends the name too. */
static __always_inline void mark_named(u32 tgid, u64 handle)
{
	struct cp_located_key key = {.tgid = tgid, .addr = handle};
	u8 one = 1;
	handle_named.update(&key, &one);
}

/* The address locate_site was given for this call */
static __always_inline void mark_site(struct cp_event *e, struct cp_probe_cfg *cfg)
{
#ifdef CP_CALLER
	mark_located(e, e->caller);
#else
	s32 func_slot = cfg->func_slot;
	if (func_slot >= 0 && func_slot < CP_MAX_SLOTS)
		mark_located(e, e->words[func_slot]);
#endif
}

/* Exit: count the call in `tally`, complete it in its pairing entry, then
 * copy its first cfg->size bytes into the ring. */
static __always_inline void end_call(struct cp_event *e, u32 probe_id, u64 now, s32 ret,
				     struct cp_owner *owner)
{
	u64 ns = now - e->ts_ns;
	int idx = probe_id;
#ifdef CP_OUTER
	if (owner && owner->outer_depth) {	/* an outer call ends: one fewer around */
		struct cp_probe_cfg *c = probes.lookup(&idx);
		if (c && c->outer)
			owner->outer_depth--;
	}
#endif
	struct cp_tally *t = tally.lookup(&idx);
	if (t) {
		__sync_fetch_and_add(&t->count, 1);
		__sync_fetch_and_add(&t->total_ns, ns);
		if (ret)
			count_error(probe_id, ret, t->err_ret, t->err_count, &t->errors_unkeyed);
	}
	struct cp_probe_cfg *cfg = probes.lookup(&idx);
	if (!cfg)
		return;
#ifdef CP_ERRORS_ONLY
	if (ret == 0) {	/* not sent: its site is located all the same */
		if (CP_LOCATES(cfg))
			mark_site(e, cfg);
		return;
	}
#endif
	e->duration_ns = ns;
	e->ret = ret;
	u64 size = cfg->size;
	if (ret == 0) {
		if (cfg->out8 | cfg->out4)
			read_outs(e, cfg->out8, cfg->out4, e->nargs);
	} else if (e->nouts) {	/* not set by a failed call: not read, not sent */
		e->nouts = 0;
		if (size < sizeof(struct cp_event))
			size -= 8 * cfg->nouts;
	}
	if (CP_LOCATES(cfg) && ((struct cp_frame *)&e->cfg[CP_FRAME_WORD])->status > 0)
		size = sizeof(struct cp_event);	/* with where it was made: cfg goes too */
	if (size > sizeof(struct cp_event))
		size = sizeof(struct cp_event);
	asm volatile("" : "+r"(size));	/* the bounded register is the one passed on */
	u64 flags = wakeup_flag(e->pid, owner);
	u64 name_at = 0;	/* a string sent after the event: a name passed, or a handle's */
	u8 handle_tried = 0;
	u32 str_slot = cfg->str_slot, handle_slot = cfg->handle_slot;	/* -1: above any slot */
	asm volatile("" : "+r"(str_slot), "+r"(handle_slot));	/* checked as used */
	if (str_slot < CP_MAX_SLOTS)
		name_at = e->words[str_slot];
	else if (ret == 0 && handle_slot < CP_MAX_SLOTS)
		name_at = handle_name_at(e->pid, e->words[handle_slot], &handle_tried);
	long err = name_at ? output_named(e, name_at, flags)
			   : events.ringbuf_output(e, size, flags);
	if (err < 0) {
		count(CP_LOST_RINGBUF);
		return;	/* not in the ring: the next call sends the site or name */
	}
	if (CP_LOCATES(cfg))
		mark_site(e, cfg);
	if (handle_tried && handle_slot < CP_MAX_SLOTS)
		mark_named(e->pid, e->words[handle_slot]);
}
