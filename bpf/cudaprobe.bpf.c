// SPDX-License-Identifier: Apache-2.0
/*
 * cudaprobe: entry/exit uprobes on CUDA API functions. Each call is paired
 * per (thread, probe), then either copied into the ring buffer `events`
 * (trace) or added to per-CPU aggregates (CP_STATS). docs/bpf.md explains
 * the design: maps, pairing slots, records, settings.
 */
#include <uapi/linux/ptrace.h>
#include "cudaprobe.h"

/* Settings: -D cflags from cudaprobe/probe/bpfprog.py, which holds every
 * default (docs/bpf.md, "Settings"). Switches (CP_STATS, CP_FILTER_PID, ...)
 * are defined or not; numbers have no default here. */
#ifndef CP_RINGBUF_PAGES
#error "CP_RINGBUF_PAGES (ring buffer pages) comes from bpfprog.py"
#endif
#ifndef CP_MAX_INFLIGHT
#error "CP_MAX_INFLIGHT (capacity of `inflight`) comes from bpfprog.py"
#endif
#ifndef CP_PAIR_THREADS
#error "CP_PAIR_THREADS (thread slots, a power of 2) comes from bpfprog.py"
#endif
#ifndef CP_NR_PROBES
#error "CP_NR_PROBES (probes in the plan) comes from bpfprog.py"
#endif
#ifndef CP_WAKEUP_EVERY
#error "CP_WAKEUP_EVERY (records per forced wakeup) comes from bpfprog.py"
#endif
#ifndef CP_MAX_STACKS
#error "CP_MAX_STACKS (capacity of `stacks`) comes from bpfprog.py"
#endif

/* What a pairing entry holds between a call's entry and its exit: the whole
 * event in trace mode, only the entry time in stats mode. */
#ifdef CP_STATS
#define cp_entry_t struct cp_stamp
#else
#define cp_entry_t struct cp_event
#endif

/* per-probe settings (struct cp_probe_cfg), filled by the loader from the
 * catalogue, indexed by probe id */
BPF_ARRAY(probes, struct cp_probe_cfg, CP_MAX_PROBES);
/* CP_ATTACHING .. CP_STOPPED (cudaprobe.h): set by the loader, so that every
 * probe begins and ends at one instant, whatever order they attach in */
BPF_ARRAY(phase, u32, 1);
/* thread slots: which thread holds each (claimed by compare-and-swap), its
 * name, and whether its first record is still to come */
BPF_ARRAY(owners, struct cp_owner, CP_PAIR_THREADS);
/* the pairing entries of the slots' threads: slot * CP_NR_PROBES + probe id */
BPF_ARRAY(owned, cp_entry_t, CP_PAIR_THREADS * CP_NR_PROBES);
/* pairing entries of threads whose slot another thread holds, keyed by
 * pairing_key() at depth 0, made at a thread's first call of a probe and kept
 * after; and of calls nested in a call of the same probe (depth 1..
 * CP_MAX_DEPTH), removed when they return */
BPF_HASH(inflight, u64, cp_entry_t, CP_MAX_INFLIGHT);
/* all zero, never written: the initial value of a new `inflight` entry */
BPF_PERCPU_ARRAY(zeroed, cp_entry_t, 1);
/* lost records by cause and forced wakeups (CP_LOST_RINGBUF, ...) */
BPF_PERCPU_ARRAY(counters, u64, CP_NR_COUNTERS);
/* failed calls per (probe, return code), for codes past the CP_ERR_SLOTS
 * that a probe's struct cp_stat or cp_tally holds; sized to the plan, as
 * per-CPU values multiply by the CPUs */
BPF_PERCPU_HASH(error_codes, struct cp_error_key, u64, CP_NR_PROBES * 16);
#ifdef CP_STATS
/* per-probe aggregates, indexed by probe id */
BPF_PERCPU_ARRAY(stats, struct cp_stat, CP_NR_PROBES);
#else
/* completed calls, each the first cp_probe_cfg.size bytes of its event */
BPF_RINGBUF_OUTPUT(events, CP_RINGBUF_PAGES);
/* every call that returned, per probe: counted before the ring can drop it */
BPF_PERCPU_ARRAY(tally, struct cp_tally, CP_NR_PROBES);
/* records submitted on this CPU: every CP_WAKEUP_EVERY-th wakes the reader */
BPF_PERCPU_ARRAY(submitted, u64, 1);
/* processes that have had an event, for threads without a slot: the first
 * one wakes the reader at once, so that it reads /proc/PID/maps (kernel
 * names) while the process still runs */
BPF_TABLE("lru_hash", u32, u8, seen_procs, 16384);
#endif
#ifdef CP_STACKS
/* user stacks of the calls (struct cp_event's stack_id) */
/* build-id stacks: each frame resolved by the kernel to its object's build-id
 * and a file offset, named after the process has exited (issue 16) */
BPF_STACK_TRACE_BUILDID(stacks, CP_MAX_STACKS);
#endif

#ifdef CP_FILTER_PID
/* processes traced: added by the loader, and their children */
BPF_HASH(targets, u32, u8, 65536);

/* follow children of traced processes (threads share the tgid already) */
TRACEPOINT_PROBE(sched, sched_process_fork)
{
	u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (!targets.lookup(&parent))
		return 0;
	u32 child = args->child_pid;
	u8 one = 1;
	targets.update(&child, &one);
	return 0;
}

#ifdef CP_FILTER_COMM
/* A process exec'ing under the wanted name is a target before its first call.
 * The comm is the one exec has just set (from the file name). Processes that
 * already run, or rename themselves, are added by the loader's /proc scan. The
 * process's name, not the thread's: PyTorch names its worker threads. */
struct cp_comm {
	char name[CP_COMM_LEN];
};
/* the wanted process name (--comm) */
BPF_ARRAY(comm_filter, struct cp_comm, 1);

TRACEPOINT_PROBE(sched, sched_process_exec)
{
	int zero = 0;
	struct cp_comm *want = comm_filter.lookup(&zero);
	char comm[CP_COMM_LEN];
	if (!want)
		return 0;
	bpf_get_current_comm(comm, sizeof(comm));
#pragma unroll
	for (int i = 0; i < CP_COMM_LEN; i++) {
		if (comm[i] != want->name[i])
			return 0;
		if (comm[i] == 0)
			break;
	}
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	u8 one = 1;
	targets.update(&tgid, &one);
	return 0;
}
#endif
#endif

static __always_inline void count(int idx)
{
	u64 *c = counters.lookup(&idx);
	if (c)
		(*c)++;
}

/* A failed call, counted by its code: in the first CP_ERR_SLOTS codes that
 * the probe's per-CPU record holds (err_ret, err_count: claimed with a
 * compare-and-swap), any more in the `error_codes` hash, or in *unkeyed
 * where that is full. Atomic: a preempted uprobe program can share its CPU
 * with another task's run of it. */
static __always_inline void count_error(u32 probe_id, s32 ret, s64 *err_ret, u64 *err_count,
					u64 *unkeyed)
{
#pragma unroll
	for (int i = 0; i < CP_ERR_SLOTS; i++) {
		s64 code = err_ret[i];
		if (code == 0)
			code = __sync_val_compare_and_swap(&err_ret[i], 0, ret) ?: ret;
		if (code == ret) {
			__sync_fetch_and_add(&err_count[i], 1);
			return;
		}
	}
	struct cp_error_key ekey = {.probe_id = probe_id, .ret = ret};
	u64 zero = 0;
	u64 *n = error_codes.lookup_or_try_init(&ekey, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		__sync_fetch_and_add(unkeyed, 1);
}

/* ---- pairing: a call's entry in its thread's slot, or in the hash ---- */

_Static_assert(CP_MAX_PROBES <= 0x10000 && CP_MAX_DEPTH < 0x10000, "pairing_key's fields");

static __always_inline u64 pairing_key(u64 pid_tgid, u32 probe_id, u64 depth)
{
	return (pid_tgid << 32) | (depth << 16) | probe_id;	/* tid in the high half */
}

/* The calls of the same probe nested in a pairing entry's call (recursion):
 * a field the entry does not use until its call returns. */
#ifdef CP_STATS
#define cp_nested(e) ((e)->nested)
#else
#define cp_nested(e) ((e)->duration_ns)
#endif

/* The `inflight` entry of this thread and probe, made on its first call. */
static __always_inline cp_entry_t *hashed_entry(u64 key)
{
	cp_entry_t *e = inflight.lookup(&key);
	if (e)
		return e;
	int zero = 0;
	cp_entry_t *init = zeroed.lookup(&zero);
	if (!init)
		return 0;
	inflight.insert(&key, init);
	e = inflight.lookup(&key);
	if (!e)
		count(CP_LOST_PAIRING);	/* the map is full */
	return e;
}

static __always_inline u32 owner_slot(u64 pid_tgid)
{
	return (u32)pid_tgid & (CP_PAIR_THREADS - 1);
}

/* This probe's entry in the slot's part of `owned`, or 0 */
static __always_inline cp_entry_t *owned_entry(u32 slot, u32 probe_id)
{
	if (probe_id >= CP_NR_PROBES)
		return 0;
	u32 idx = slot * CP_NR_PROBES + probe_id;
	return owned.lookup(&idx);
}

/* Entry side: the entry this call fills, the thread's own or a hashed one;
 * *mine is the thread's slot where it holds one. A thread met here for the
 * first time passes the pid filter first. */
static __always_inline cp_entry_t *pairing_entry(u64 pid_tgid, u32 probe_id,
						  struct cp_owner **mine)
{
	u32 slot = owner_slot(pid_tgid);
	struct cp_owner *o = owners.lookup(&slot);
	if (!o)
		return 0;
	if (o->pid_tgid == pid_tgid) {
		*mine = o;
		return owned_entry(slot, probe_id);
	}
#ifdef CP_FILTER_PID
	u32 tgid = pid_tgid >> 32;
	if (!targets.lookup(&tgid))
		return 0;
#endif
	if (o->pid_tgid == 0 && probe_id < CP_NR_PROBES &&
	    __sync_val_compare_and_swap(&o->pid_tgid, 0, pid_tgid) == 0) {
#ifndef CP_STATS
		bpf_get_current_comm(o->comm, sizeof(o->comm));
		o->wake = 1;	/* this thread's first record wakes the reader */
#endif
		*mine = o;
		return owned_entry(slot, probe_id);
	}
	return hashed_entry(pairing_key(pid_tgid, probe_id, 0));
}

/* Exit side: the entry of the call returning, or 0 (filtered out, or entered
 * before the probes were attached). A thread may have a call in the hash
 * from before it owned a slot. */
static __always_inline cp_entry_t *paired_entry(u64 pid_tgid, u32 probe_id,
						 struct cp_owner **mine)
{
	u32 slot = owner_slot(pid_tgid);
	struct cp_owner *o = owners.lookup(&slot);
	if (o && o->pid_tgid == pid_tgid) {
		cp_entry_t *e = owned_entry(slot, probe_id);
		if (e && e->ts_ns) {
			*mine = o;
			return e;
		}
	}
	u64 key = pairing_key(pid_tgid, probe_id, 0);
	cp_entry_t *e = inflight.lookup(&key);
	return e && e->ts_ns ? e : 0;
}

/* Entry of a call made while the thread is in a call of the same probe
 * (`outer`, its outermost): the call's depth is counted in the outer entry,
 * and its pairing entry made in the hash for that depth. Past CP_MAX_DEPTH
 * the call is counted as lost; its depth is still counted, so that the
 * exits pair with the right entries. */
static __always_inline cp_entry_t *nested_entry(cp_entry_t *outer, u64 pid_tgid, u32 probe_id)
{
	u64 depth = ++cp_nested(outer);
	if (depth > CP_MAX_DEPTH) {
		count(CP_LOST_DEPTH);
		return 0;
	}
	return hashed_entry(pairing_key(pid_tgid, probe_id, depth));
}

/* Exit side of nested_entry: the innermost nested call returns (calls return
 * in the reverse order of their entries), one fewer is counted in `outer`.
 * Its entry in the hash, for the caller to complete and then delete by *key;
 * 0 where it has none (past CP_MAX_DEPTH, or the hash was full: counted at
 * entry). */
static __always_inline cp_entry_t *innermost_entry(cp_entry_t *outer, u64 pid_tgid,
						   u32 probe_id, u64 *key)
{
	u64 depth = cp_nested(outer)--;
	if (depth > CP_MAX_DEPTH)
		return 0;
	*key = pairing_key(pid_tgid, probe_id, depth);
	cp_entry_t *e = inflight.lookup(key);
	return e && e->ts_ns ? e : 0;
}

#ifdef CP_STATS
/* ---- stats: the entry time in, aggregates out ---- */

/* Entry: aggregates need only the time. */
static __always_inline void begin_call(struct pt_regs *ctx, struct cp_stamp *s, u32 probe_id,
				       u64 pid_tgid, struct cp_owner *owner)
{
	s->pid = pid_tgid >> 32;
	s->tid = (u32)pid_tgid;
	s->nested = 0;
	s->ts_ns = bpf_ktime_get_ns();
}

/* floor(log2(v)), clamped to the last histogram slot */
static __always_inline u32 log2_slot(u64 v)
{
	u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r < CP_HIST_SLOTS ? r : CP_HIST_SLOTS - 1;
}

/* Exit: per-CPU values, but a preempted uprobe program can share its CPU
 * with another task's run of it: counts are atomic, min/max best effort. */
static __always_inline void end_call(struct cp_stamp *entry, u32 probe_id, u64 now, s32 ret,
				     struct cp_owner *owner)
{
	u64 ns = now - entry->ts_ns;
	int idx = probe_id;
	struct cp_stat *s = stats.lookup(&idx);
	if (!s)
		return;
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->total_ns, ns);
	if (ns < s->min_ns || s->min_ns == 0)
		s->min_ns = ns;
	if (ns > s->max_ns)
		s->max_ns = ns;
	u32 slot = log2_slot(ns);
	if (slot < CP_HIST_SLOTS) {	/* always: bounds the index for the verifier */
		__sync_fetch_and_add(&s->hist[slot], 1);
		__sync_fetch_and_add(&s->hist_ns[slot], ns);
	}
	if (ret)
		count_error(probe_id, ret, s->err_ret, s->err_count, &s->errors_unkeyed);
}

#else
/* ---- trace: the arguments in, a record out ---- */

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

/* Where a launch's kernel is, and where a call was made (issue 16). A host
 * stub, or a call site, is named from the object it is in, which
 * /proc/PID/maps tells only while the process lives. So the first launch of
 * each kernel (host-stub address) in a process, or with CP_CALLER the first
 * call from each call site, records the call site as the kernel's build-id
 * stack walk resolves it now: the object's build-id and the file offset of
 * the return address (on Linux >= 6.12 the walk from a function's entry
 * starts with the return address), and the address itself; a launch's stub
 * is in the same object, `func - caller` away. One lookup per call after that. */
struct cp_located_key {
	u32 tgid;
	u32 pad;
	u64 addr;	/* the host stub, or the call site */
};
BPF_TABLE("lru_hash", struct cp_located_key, u8, located, 16384);

static __always_inline void locate_site(struct pt_regs *ctx, struct cp_event *e, u64 addr)
{
	struct cp_frame *f = (struct cp_frame *)&e->cfg[CP_FRAME_WORD];
	f->status = 0;	/* the entry is reused: nothing recorded unless below */
	struct cp_located_key key = {.tgid = e->pid, .addr = addr};
	u8 one = 1;
	if (located.lookup(&key))
		return;
	located.update(&key, &one);
	bpf_probe_read_user(&f->caller, sizeof(f->caller), (void *)PT_REGS_SP(ctx));
	/* skip 1: frame 0 is the probed function itself */
	if (bpf_get_stack(ctx, f, 32, 1 | BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) < 32)
		f->status = 0;
}

/* probes whose records may carry a struct cp_frame: every one with CP_CALLER
 * (cudaprobe memory), else the launches */
#ifdef CP_CALLER
#define CP_LOCATES(cfg) 1
#else
#define CP_LOCATES(cfg) ((cfg)->func_slot >= 0)
#endif

#ifdef CP_PYSTACKS
#include "pystacks.bpf.h"
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
	e->duration_ns = 0;	/* cp_nested() until the exit sets it */
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
#ifdef CP_STACKS
	e->stack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#else
	e->stack_id = -1;
#endif
	e->ts_ns = bpf_ktime_get_ns();	/* last: the entry is complete */
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

/* Kernel names whole (issue 16). A name passed to cuModuleGetFunction or
 * cuLibraryGetKernel runs to kilobytes for C++ templates (PyTorch's): it is
 * read at exit, where the caller's string is still there, into a per-CPU
 * scratch record after a copy of the event, and both go into the ring as one
 * record of their length (the reader takes any record longer than an event
 * for one of these). The calls are rare: the copy's cost does not matter. */
struct cp_named {
	struct cp_event e;
	char name[CP_NAME_MAX];
};
BPF_PERCPU_ARRAY(named, struct cp_named, 1);

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
BPF_TABLE("lru_hash", struct cp_located_key, u8, handle_named, 16384);

static __always_inline u64 handle_name_at(u32 tgid, u64 handle)
{
	struct cp_located_key key = {.tgid = tgid, .addr = handle};
	u8 one = 1;
	u64 at = 0;
	if (!handle || handle_named.lookup(&key))
		return 0;
	handle_named.update(&key, &one);
	bpf_probe_read_user(&at, sizeof(at), (void *)(handle + CP_HANDLE_NAME_OFFSET));
	return at;
}

/* Exit: count the call in `tally`, complete it in its pairing entry, then
 * copy its first cfg->size bytes into the ring. */
static __always_inline void end_call(struct cp_event *e, u32 probe_id, u64 now, s32 ret,
				     struct cp_owner *owner)
{
	u64 ns = now - e->ts_ns;
	int idx = probe_id;
	struct cp_tally *t = tally.lookup(&idx);
	if (t) {
		__sync_fetch_and_add(&t->count, 1);
		__sync_fetch_and_add(&t->total_ns, ns);
		if (ret)
			count_error(probe_id, ret, t->err_ret, t->err_count, &t->errors_unkeyed);
	}
#ifdef CP_ERRORS_ONLY
	if (ret == 0)
		return;
#endif
	struct cp_probe_cfg *cfg = probes.lookup(&idx);
	if (!cfg)
		return;
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
	if (CP_LOCATES(cfg) && ((struct cp_frame *)&e->cfg[CP_FRAME_WORD])->status)
		size = sizeof(struct cp_event);	/* with where it was made: cfg goes too */
	if (size > sizeof(struct cp_event))
		size = sizeof(struct cp_event);
	asm volatile("" : "+r"(size));	/* the bounded register is the one passed on */
	u64 flags = wakeup_flag(e->pid, owner);
	u64 name_at = 0;	/* a string sent after the event: a name passed, or a handle's */
	u32 str_slot = cfg->str_slot, handle_slot = cfg->handle_slot;	/* -1: above any slot */
	asm volatile("" : "+r"(str_slot), "+r"(handle_slot));	/* checked as used */
	if (str_slot < CP_MAX_SLOTS)
		name_at = e->words[str_slot];
	else if (ret == 0 && handle_slot < CP_MAX_SLOTS)
		name_at = handle_name_at(e->pid, e->words[handle_slot]);
	long err = name_at ? output_named(e, name_at, flags)
			   : events.ringbuf_output(e, size, flags);
	if (err < 0)
		count(CP_LOST_RINGBUF);
}
#endif	/* CP_STATS */

/* ---- the programs ---- */

static __always_inline u32 current_phase(void)
{
	int zero = 0;
	u32 *p = phase.lookup(&zero);
	return p ? *p : CP_STOPPED;
}

/* A call begins only while CP_TRACING. If the thread is in a call of this
 * probe already, the call is nested in it (recursion): paired at its depth. */
static __always_inline int cp_entry(struct pt_regs *ctx, u32 probe_id)
{
	if (current_phase() != CP_TRACING)
		return 0;
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct cp_owner *owner = 0;
	cp_entry_t *entry = pairing_entry(pid_tgid, probe_id, &owner);
	if (entry && entry->ts_ns)
		entry = nested_entry(entry, pid_tgid, probe_id);
	if (!entry)
		return 0;
	begin_call(ctx, entry, probe_id, pid_tgid, owner);
#ifdef CP_PYSTACKS
	/* the Python stack, sent with a later entry time: the call's from then on */
	entry->ts_ns = py_capture(pid_tgid);
#endif
	return 0;
}

/* A call that began completes until CP_STOPPED: the calls under way when
 * tracing stops are whole. */
static __always_inline int cp_exit(struct pt_regs *ctx, u32 probe_id)
{
	if (current_phase() == CP_STOPPED)
		return 0;	/* a call under way then stays in flight */
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct cp_owner *owner = 0;
	cp_entry_t *entry = paired_entry(pid_tgid, probe_id, &owner);
	if (!entry)
		return 0;	/* filtered out, or entered before tracing began */
	u64 now = bpf_ktime_get_ns();
	s32 ret = (s32)PT_REGS_RC(ctx);
	if (cp_nested(entry)) {
		u64 key = 0;
		cp_entry_t *inner = innermost_entry(entry, pid_tgid, probe_id, &key);
		if (inner) {
			end_call(inner, probe_id, now, ret, owner);
			inflight.delete(&key);
		}
		return 0;
	}
	end_call(entry, probe_id, now, ret, owner);
	entry->ts_ns = 0;	/* done: the entry waits for this thread's next call */
	return 0;
}

/* uprobe_multi programs: the probe id is the attach cookie */
int cp_enter(struct pt_regs *ctx)
{
	return cp_entry(ctx, (u32)bpf_get_attach_cookie(ctx));
}

int cp_return(struct pt_regs *ctx)
{
	return cp_exit(ctx, (u32)bpf_get_attach_cookie(ctx));
}

#ifdef CP_PROBES
/* the perf-event fallback: a program pair per probe, its id a constant */
#define CP_PROBE(id)                                                      \
	int cp_enter_##id(struct pt_regs *ctx) { return cp_entry(ctx, id); } \
	int cp_return_##id(struct pt_regs *ctx) { return cp_exit(ctx, id); }
CP_PROBES
#endif
