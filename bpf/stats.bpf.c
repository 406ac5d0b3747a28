// SPDX-License-Identifier: Apache-2.0
/*
 * cudaprobe stats: entry/exit uprobes on CUDA API functions. Entry keeps the
 * call's start in its pairing entry (pairing.bpf.h); exit adds the call to
 * per-CPU aggregates per probe (`stats`). Nothing goes to a ring buffer.
 * docs/bpf.md and docs/stats.md explain the design.
 */
#include <uapi/linux/ptrace.h>
#include "cudaprobe.h"

/* Settings: pairing.bpf.h checks those every program needs; this one needs
 * no other (docs/bpf.md, "Settings"). */

/* ---- maps (pairing.bpf.h declares those every program has) ---- */

/* per-probe aggregates (struct cp_stat), indexed by probe id */
BPF_PERCPU_ARRAY(stats, struct cp_stat, CP_NR_PROBES);

/* a pairing entry holds the entry time: all the exit needs */
#define CP_ENTRY struct cp_stats_entry
#include "pairing.bpf.h"

/* Nothing kept with a slot: aggregates need no thread name, no wakeup. */
static __always_inline void slot_claimed(struct cp_owner *o)
{
}

/* Entry: aggregates need only the time. */
static __always_inline void begin_call(struct pt_regs *ctx, struct cp_stamp *s, u32 probe_id,
				       u64 pid_tgid, struct cp_owner *owner)
{
	s->pid = pid_tgid >> 32;
	s->tid = (u32)pid_tgid;
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
