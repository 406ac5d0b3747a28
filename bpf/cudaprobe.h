/* Shared between the BPF programs (bpf/trace.bpf.c, bpf/stats.bpf.c) and their
 * Python mirror in cudaprobe/probe/event.py and bpfprog.py
 * (tests/unit/test_event_layout.py checks they agree). */
#ifndef CUDAPROBE_H
#define CUDAPROBE_H

#define CP_MAX_SLOTS 12   /* argument words: 6 registers + up to 6 stack words */
#define CP_REG_SLOTS 6
#define CP_MAX_OUTS 4     /* out-parameters read at exit */
#define CP_CFG_WORDS 16   /* copied at entry: a launch config struct, or a C string */
#define CP_CONFIG_MAX 64  /* bytes of a struct copied at entry (cfg words before CP_FRAME_WORD) */
#define CP_COMM_LEN 16

/* indices into the per-CPU `counters` array */
#define CP_LOST_RINGBUF 0   /* ring buffer full: event dropped */
#define CP_LOST_PAIRING 1   /* in-flight map full: call not paired */
#define CP_WAKEUPS 2        /* forced reader wakeups */
#define CP_LOST_DEPTH 3     /* a call nested past CP_MAX_DEPTH in its own function: not paired */
#define CP_NR_COUNTERS 4

/* Calls of one function nested in each other on one thread (recursion) that
 * are paired: the outermost in the thread's pairing entry, the next
 * CP_MAX_DEPTH each in an `inflight` entry of its depth (pairing_key). */
#define CP_MAX_DEPTH 32

/* map `phase`: when the probes count. Entries begin calls only while
 * CP_TRACING, which the loader sets once every probe is attached and leaves
 * for CP_STOPPING before it detaches any: every function starts and stops at
 * the same instant. Exits complete calls until CP_STOPPED (perf probes only,
 * which outlive the detach). */
#define CP_ATTACHING 0
#define CP_TRACING 1
#define CP_STOPPING 2
#define CP_STOPPED 3

/* map `targets` (CP_FILTER_PID): a process's state. A child of a target whose
 * links are being attached (CP_PER_PROCESS) is LINKING: its calls begin once
 * the loader has set it TRACED, with all its links in. */
#define CP_TARGET_TRACED 1
#define CP_TARGET_LINKING 2

/* Per-probe settings, filled by the loader from the catalogue (map `probes`). */
struct cp_probe_cfg {
	__u32 nstack;    /* argument words to read from the stack at entry */
	__s32 cfg_slot;  /* slot holding a launch-config pointer read at entry, or -1 */
	__u32 out8;      /* bitmask of slots that point at 8-byte out-parameters */
	__u32 out4;      /* bitmask of slots that point at 4-byte out-parameters */
	__s32 str_slot;  /* slot holding a C string copied at entry into `cfg`, or -1 */
	__u16 nargs;     /* argument words the probe has (registers, then stack) */
	__u16 nouts;     /* out-parameters it reads at exit */
	__u32 size;      /* bytes of struct cp_event it puts in the ring: CP_EVENT_SIZE(nargs
			  * + nouts), or the whole event where it copies at entry */
	__s32 func_slot; /* slot holding a kernel's host-stub address (a launch), or -1 */
	__s32 handle_slot; /* slot holding the launched kernel (FUNC or CU_FUNCTION), or -1 */
	__u32 cfg_off;   /* the window of the cfg_slot struct copied at entry: its offset */
	__u32 cfg_len;   /* and length, at most CP_CONFIG_MAX (catalogue/structs.py) */
	__u32 outer;     /* 1: an NCCL call, the outermost layer (CP_OUTER): the calls its
			  * thread makes inside it say so (cp_event.caller) */
	__u32 kept;      /* 1: its links stay in between serve --duty's slices (an
			  * allocation or free, counted exactly): its calls span
			  * slices (map `slice_start`) */
};

/* Where the driver keeps a kernel handle's name: the object a CUfunction,
 * CUkernel or cudaKernel_t addresses holds a pointer to the mangled name at
 * this offset (driver 580, scripts/gpu/handle_layout.cu; docs/driver.md). */
#define CP_HANDLE_NAME_OFFSET 8

/* One completed call. The entry probe fills it in place in `inflight` (one
 * entry per thread and probe, kept between calls: ts_ns == 0 there means
 * the thread is not in that call), the exit probe completes it there and
 * copies its first `size` bytes (cp_probe_cfg) into the ring buffer: the
 * header and the words the probe has, args[0..nargs) then outs[0..nouts)
 * (cudaMalloc: 64 + 3 * 8 bytes), or the whole event for probes that copy
 * a launch config or a string at entry (`cfg` is last for that). */
#define CP_MAX_WORDS (CP_MAX_SLOTS + CP_MAX_OUTS)

struct cp_event {
	__u64 ts_ns;        /* entry time, CLOCK_MONOTONIC */
	__u64 duration_ns;  /* set at exit */
	__u32 pid;          /* tgid, host pid namespace */
	__u32 tid;
	__u16 func_id;      /* index into the probe table built by the loader */
	__u8 nargs;         /* words[0..nargs): the argument words */
	__u8 nouts;         /* words[nargs..nargs+nouts): out-parameters read at exit */
	__s32 ret;          /* cudaError_t / CUresult */
	char comm[CP_COMM_LEN];
	__u64 caller;       /* CP_CALLER: return address at entry, the call site; CP_OUTER:
			     * 1 where the call was made inside an outer (NCCL) call of its
			     * thread, else 0 */
	__s64 stack_id;     /* user stack in the `stacks` map (CP_STACKS), else -1 */
	__u64 words[CP_MAX_WORDS];
	__u64 cfg[CP_CFG_WORDS];  /* launch config (cfg_slot), or NUL-terminated string (str_slot) */
};

/* Kernel names whole (see cp_named in trace.bpf.c): a str_slot probe's
 * record is its whole event followed by the string, read at exit, NUL included;
 * a launch's first record per process and kernel (with CP_CALLER, a call's
 * first record per process and call site) carries where the call was made,
 * in cfg words CP_FRAME_WORD.. (struct cp_frame). */
#define CP_NAME_MAX 8192
#define CP_FRAME_WORD 8

/* The launch's call site as the kernel's build-id stack walk resolves it
 * (struct bpf_stack_build_id: status 1 = build_id and offset valid, 2 = only
 * the address, 0 = not recorded), and the return address read at entry. The
 * host stub the launch names is in the same object, `func - caller` further. */
struct cp_frame {
	__s32 status;
	__u8 build_id[20];
	__u64 offset;     /* file offset of the caller's return address */
	__u64 caller;
};

#define CP_EVENT_HEAD __builtin_offsetof(struct cp_event, words)
#define CP_EVENT_SIZE(nwords) (CP_EVENT_HEAD + 8 * (nwords))

/* A thread's pairing slot (map `owners`): which thread holds it, 0 when free,
 * and (trace) its name, taken when it claims the slot and kept up to date by
 * the task_rename tracepoint; comm_seq is odd while that writes it. wake is
 * set when the thread claims the slot: its first record wakes the reader. */
struct cp_owner {
	__u64 pid_tgid;
	__u64 comm_seq;
	char comm[CP_COMM_LEN];
	__u64 wake;
	__u64 outer_depth;  /* CP_OUTER: outer (NCCL) calls the thread is in now */
};

/* stats: what entry keeps of a call, all its exit needs to time it */
struct cp_stamp {
	__u64 ts_ns;  /* entry time; 0: not in a call */
	__u32 pid;
	__u32 tid;
};

/* A pairing entry (maps `owned` and `inflight`, bpf/pairing.bpf.h): one per
 * thread and probe, kept between calls. Entry fills `call` in place, ts_ns
 * last; exit completes it, hands it on and sets ts_ns to 0. `nested` counts
 * the calls of the same probe made inside this one on the thread (recursion),
 * each paired in an `inflight` entry of its depth. The Python side reads
 * `call` by name (in-flight calls, the sweep of exited threads). */
struct cp_trace_entry {
	__u64 nested;
	struct cp_event call;
};

struct cp_stats_entry {
	__u64 nested;
	struct cp_stamp call;
};

#define CP_ERR_SLOTS 4  /* return codes counted in struct cp_stat and cp_tally, per CPU */

/* Trace: per-probe counts of the calls that returned (per-CPU map `tally`,
 * indexed by probe id), taken before the ring buffer can drop the call's
 * record, so that the summary's counts are exact; failed calls by return
 * code as struct cp_stat counts them. */
struct cp_tally {
	__u64 count;
	__u64 total_ns;
	__u64 errors_unkeyed;  /* failed calls not counted in `error_codes` (map full) */
	__s64 err_ret[CP_ERR_SLOTS];    /* the first non-zero return codes met, 0: free */
	__u64 err_count[CP_ERR_SLOTS];  /* calls that returned err_ret[i] */
};

/* stats: per-probe aggregates (per-CPU map `stats`, indexed by probe id).
 * hist[k] counts calls of [2^k, 2^(k+1)) ns (k = 0 also holds 0 and 1 ns;
 * the last slot everything longer) and hist_ns[k] sums their durations, so
 * that percentiles can be placed around each slot's mean. */
#define CP_HIST_SLOTS 48

struct cp_stat {
	__u64 count;
	__u64 total_ns;
	__u64 min_ns;       /* valid where count > 0 */
	__u64 max_ns;
	__u64 errors_unkeyed;  /* failed calls not counted in `error_codes` (map full) */
	__u64 hist[CP_HIST_SLOTS];
	__u64 hist_ns[CP_HIST_SLOTS];
	__s64 err_ret[CP_ERR_SLOTS];    /* the first non-zero return codes met, 0: free */
	__u64 err_count[CP_ERR_SLOTS];  /* calls that returned err_ret[i] */
};

/* key of the per-CPU `error_codes` map: calls per (probe, non-zero return code)
 * for codes past the CP_ERR_SLOTS that struct cp_stat or cp_tally holds */
struct cp_error_key {
	__u32 probe_id;
	__s32 ret;
};

#endif
