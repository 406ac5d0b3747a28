/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What both programs (trace.bpf.c, stats.bpf.c) do with a call: which
 * processes count, when probes count (`phase`), and the pairing of a call's
 * entry with its exit per (thread, probe), recursion included; then the
 * entry and exit programs that the loader attaches. docs/bpf.md explains it.
 *
 * The program that includes this header declares its own maps first, then
 * defines CP_ENTRY (its pairing entry: struct cp_trace_entry or
 * cp_stats_entry) and, after the include, what a call begins and ends with:
 * begin_call(), end_call() and slot_claimed().
 */
#ifndef CP_PAIRING_BPF_H
#define CP_PAIRING_BPF_H

/* Settings every program needs: -D cflags from cudaprobe/probe/bpfprog.py,
 * which holds every default (docs/bpf.md, "Settings"). Switches (CP_FILTER_PID,
 * CP_PROBES, ...) are defined or not; numbers have no default here. */
#ifndef CP_MAX_INFLIGHT
#error "CP_MAX_INFLIGHT (capacity of `inflight`) comes from bpfprog.py"
#endif
#ifndef CP_PAIR_THREADS
#error "CP_PAIR_THREADS (thread slots, a power of 2) comes from bpfprog.py"
#endif
#ifndef CP_NR_PROBES
#error "CP_NR_PROBES (probes in the plan) comes from bpfprog.py"
#endif
#ifndef CP_MAX_ERROR_CODES
#error "CP_MAX_ERROR_CODES (capacity of `error_codes`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_TARGETS
#error "CP_MAX_TARGETS (capacity of `targets`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_LIBRARIES
#error "CP_MAX_LIBRARIES (capacity of `library_ready`) comes from bpfprog.py"
#endif
#ifndef CP_ENTRY
#error "CP_ENTRY (the program's pairing entry) is defined by the program"
#endif

typedef CP_ENTRY cp_entry_t;
/* what a pairing entry holds of its call: struct cp_event or cp_stamp */
typedef __typeof__(((cp_entry_t *)0)->call) cp_call_t;

/* ---- maps every program has ---- */

/* per-probe settings (struct cp_probe_cfg), filled by the loader from the
 * catalogue, indexed by probe id */
BPF_ARRAY(probes, struct cp_probe_cfg, CP_NR_PROBES);
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
#ifdef CP_DUTY
/* serve --duty: when the slice under way began (CLOCK_MONOTONIC, written by
 * the loader before its links go in). A sampled function's pairing entry
 * holding a call begun before it is left from an earlier slice */
BPF_ARRAY(slice_start, u64, 1);
#endif
/* uprobe_multi links: per library slot (the attach cookie's upper half), 1
 * once every link of the library is in. A library probed while tracing runs
 * (a dlopen, a process's own copy) then starts in all its functions at once,
 * as the `phase` map makes the first libraries start. */
BPF_ARRAY(library_ready, u8, CP_MAX_LIBRARIES);
/* lost records by cause and forced wakeups (CP_LOST_RINGBUF, ...) */
BPF_PERCPU_ARRAY(counters, u64, CP_NR_COUNTERS);
/* failed calls per (probe, return code), for codes past the CP_ERR_SLOTS that
 * a probe's struct cp_stat or cp_tally holds; sized to the plan, as per-CPU
 * values multiply by the CPUs */
BPF_PERCPU_HASH(error_codes, struct cp_error_key, u64, CP_MAX_ERROR_CODES);
#ifdef CP_FILTER_PID
/* processes traced: added by the loader, and their children; the value is a
 * CP_TARGET_* state */
BPF_HASH(targets, u32, u8, CP_MAX_TARGETS);
#endif
#ifdef CP_FILTER_COMM
struct cp_comm {
	char name[CP_COMM_LEN];
};
/* the wanted process name (--comm) */
BPF_ARRAY(comm_filter, struct cp_comm, 1);
#endif

/* ---- what the including program defines ---- */

/* Entry: what the program keeps of the call, into its pairing entry; ts_ns
 * last, when it is complete. */
static __always_inline void begin_call(struct pt_regs *ctx, cp_call_t *call, u32 probe_id,
				       u64 pid_tgid, struct cp_owner *owner);
/* Exit: the call is complete (`now`, `ret`): count it, hand it on. */
static __always_inline void end_call(cp_call_t *call, u32 probe_id, u64 now, s32 ret,
				     struct cp_owner *owner);
/* The current thread has just claimed `owner`'s slot. */
static __always_inline void slot_claimed(struct cp_owner *owner);

/* ---- which processes count ---- */

#ifdef CP_FILTER_PID
/* follow the child processes of traced processes (threads share the tgid
 * already). With links per process (CP_PER_PROCESS) a child's links are
 * attached by the loader one function after another: it is traced from the
 * moment they are all in (the loader sets CP_TARGET_TRACED), not function by
 * function. */
#ifdef CP_PER_PROCESS
/* each child process of a traced process, as it is made: its pid and its
 * parent's. The loader links at once one that maps a probed library (a
 * fork without exec shares its parent's mappings), and says so of one gone
 * before its links were in (cudaprobe/probe/seizer.py) */
struct cp_fork {
	u32 child;
	u32 parent;
	u64 ns;  /* when it was made (bpf_ktime_get_ns: CLOCK_MONOTONIC) */
	u32 thread;  /* the parent's thread that made it */
	u32 vfork;  /* 1: made by vfork (or posix_spawn): it runs nothing of its own
		     * before it execs or exits, its parent waiting meanwhile */
};
BPF_RINGBUF_OUTPUT(forks, 1);
/* each such child, until the loader lets it go: a child forked by glibc's
 * fork() in a process the loader gave a fork hold (cudaprobe/probe/forkhold.py)
 * waits in the kernel, as fork returns in it, while its key is here (value
 * 2 once it waits) and not 3 (seized: it stops as it returns), a bound of
 * time at most */
BPF_HASH(fork_holds, u32, u64, CP_MAX_TARGETS);
#endif

#define CP_CLONE_THREAD 0x00010000
#define CP_CLONE_VFORK 0x00004000
/* A new task of a traced process, before it first runs: a child process is a
 * target too (a new thread shares its process's state, by its tgid) */
TRACEPOINT_PROBE(task, task_newtask)
{
	if (args->clone_flags & CP_CLONE_THREAD)
		return 0;
	u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (!targets.lookup(&parent))
		return 0;
	u32 child = args->pid;
#ifdef CP_PER_PROCESS
	u8 linking = CP_TARGET_LINKING;
	targets.update(&child, &linking);
	u64 held = 1;
	fork_holds.update(&child, &held);
	/* (a parent still linking too: its own record comes first. The ring full:
	 * the next look finds the child, if it still runs) */
	struct cp_fork fork = {.child = child, .parent = parent, .ns = bpf_ktime_get_ns(),
			       .thread = (u32)bpf_get_current_pid_tgid(),
			       .vfork = (args->clone_flags & CP_CLONE_VFORK) != 0};
	forks.ringbuf_output(&fork, sizeof(fork), 0);
#else
	u8 traced = CP_TARGET_TRACED;
	targets.update(&child, &traced);
#endif
	return 0;
}

#ifdef CP_FILTER_COMM
/* A process exec'ing under the wanted name is a target before its first call.
 * The comm is the one exec has just set (from the file name). Processes that
 * already run, or rename themselves, are added by the loader's /proc scan. The
 * process's name, not the thread's: PyTorch names its worker threads. */
static __always_inline void comm_exec(u32 tgid)
{
	int zero = 0;
	struct cp_comm *want = comm_filter.lookup(&zero);
	char comm[CP_COMM_LEN];
	if (!want)
		return;
	bpf_get_current_comm(comm, sizeof(comm));
#pragma unroll
	for (int i = 0; i < CP_COMM_LEN; i++) {
		if (comm[i] != want->name[i])
			return;
		if (comm[i] == 0)
			break;
	}
#ifdef CP_PER_PROCESS
	/* its links come from the loader, at its next poll: traced once they are in
	 * (one already a target keeps its state: its links are in or coming) */
	if (targets.lookup(&tgid))
		return;
	u8 traced = CP_TARGET_LINKING;
#else
	u8 traced = CP_TARGET_TRACED;
#endif
	targets.update(&tgid, &traced);
}
#endif
#endif

#if defined(CP_FILTER_COMM) || defined(CP_PYSTACKS)
#ifdef CP_PYSTACKS
static __always_inline void py_exec(u32 tgid);	/* in pystacks.bpf.h */
#endif

/* The one exec tracepoint (a program may attach only one): each job that
 * exec has, in turn. */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
#ifdef CP_FILTER_COMM
	comm_exec(tgid);
#endif
#ifdef CP_PYSTACKS
	py_exec(tgid);
#endif
	return 0;
}
#endif

/* ---- counting ---- */

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

_Static_assert(CP_NR_PROBES <= 0x10000 && CP_MAX_DEPTH < 0x10000, "pairing_key's fields");

static __always_inline u64 pairing_key(u64 pid_tgid, u32 probe_id, u64 depth)
{
	return (pid_tgid << 32) | (depth << 16) | probe_id;	/* tid in the high half */
}

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
	u8 *state = targets.lookup(&tgid);
	if (!state || *state != CP_TARGET_TRACED)
		return 0;
#endif
	if (o->pid_tgid == 0 && probe_id < CP_NR_PROBES &&
	    __sync_val_compare_and_swap(&o->pid_tgid, 0, pid_tgid) == 0) {
		slot_claimed(o);
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
		if (e && e->call.ts_ns) {
			*mine = o;
			return e;
		}
	}
	u64 key = pairing_key(pid_tgid, probe_id, 0);
	cp_entry_t *e = inflight.lookup(&key);
	return e && e->call.ts_ns ? e : 0;
}

/* Entry of a call made while the thread is in a call of the same probe
 * (`outer`, its outermost): the call's depth is counted in the outer entry,
 * and its pairing entry made in the hash for that depth. Past CP_MAX_DEPTH
 * the call is counted as lost; its depth is still counted, so that the
 * exits pair with the right entries. */
static __always_inline cp_entry_t *nested_entry(cp_entry_t *outer, u64 pid_tgid, u32 probe_id)
{
	u64 depth = ++outer->nested;
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
	u64 depth = outer->nested--;
	if (depth > CP_MAX_DEPTH)
		return 0;
	*key = pairing_key(pid_tgid, probe_id, depth);
	cp_entry_t *e = inflight.lookup(key);
	return e && e->call.ts_ns ? e : 0;
}

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
	if (entry && entry->call.ts_ns)
		entry = nested_entry(entry, pid_tgid, probe_id);
	if (!entry)
		return 0;
	entry->nested = 0;
	begin_call(ctx, &entry->call, probe_id, pid_tgid, owner);
	return 0;
}

/* The entry holds a call of a sampled function begun before serve --duty's
 * slice under way (its return came after that slice's links were out: it is
 * never seen). Checked at the exit only: the entry program (with
 * --py-stacks) is the verifier's largest. */
static __always_inline int stale_entry(cp_entry_t *e, u32 probe_id)
{
#ifdef CP_DUTY
	int zero = 0;
	u64 *start = slice_start.lookup(&zero);
	if (!start || e->call.ts_ns >= *start)
		return 0;
	struct cp_probe_cfg *cfg = probes.lookup(&probe_id);
	return !(cfg && cfg->kept);
#else
	return 0;	/* no slices: every return is its entry's */
#endif
}

/* A call that began completes until CP_STOPPED: the calls under way when
 * tracing stops are whole. A return whose entry holds a call of an earlier
 * slice is another call's, begun as the links went back in (the return link
 * first): the entry is let go, nothing made; so it is where such an entry's
 * nested calls have all returned (the next call pairs at depth 0 again). */
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
#ifdef CP_NO_STATUS
	s32 ret = CP_NO_STATUS(probe_id) ? 0 : (s32)PT_REGS_RC(ctx);
#else
	s32 ret = (s32)PT_REGS_RC(ctx);
#endif
	if (entry->nested) {
		u64 key = 0;
		cp_entry_t *inner = innermost_entry(entry, pid_tgid, probe_id, &key);
		if (inner) {
			end_call(&inner->call, probe_id, now, ret, owner);
			inflight.delete(&key);
		}
		if (!entry->nested && stale_entry(entry, probe_id))
			entry->call.ts_ns = 0;
		return 0;
	}
	if (stale_entry(entry, probe_id)) {
		entry->call.ts_ns = 0;
		return 0;
	}
	end_call(&entry->call, probe_id, now, ret, owner);
	entry->call.ts_ns = 0;	/* done: the entry waits for this thread's next call */
	return 0;
}

/* uprobe_multi programs: the attach cookie is the probe id, and in its upper
 * half the library's slot in `library_ready` */
int cp_enter(struct pt_regs *ctx)
{
	u64 cookie = bpf_get_attach_cookie(ctx);
	u32 slot = cookie >> 32;
	u8 *ready = library_ready.lookup(&slot);
	if (!ready || !*ready)
		return 0;
	return cp_entry(ctx, (u32)cookie);
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

#endif
