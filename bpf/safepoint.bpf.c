/* The safe point of the GPU-time injection (--gpu-time on running processes):
 * uprobes on CUDA call entries that stop a chosen thread there with a signal,
 * for cudaprobe's ptrace to take it (targets/inject.py). One program serves
 * every process being injected: a process is watched while it has an entry
 * in `inside` (its CUDA libraries' code ranges; none yet for a process held
 * at its first open of one), and its probes are uprobe_multi links of its
 * own, or, in perf mode, perf events of this program's alone.
 *
 * An entry counts only when the call comes from outside every CUDA library
 * (its return address, read at the stack pointer, lies in none of the
 * process's ranges): a call the program made, not one CUDA made within a call
 * of its own, so that the thread holds no CUDA lock. `seen` counts such
 * entries per thread (keyed by pid and tid); a thread cudaprobe has seized is
 * put in `armed` with the signal to send, and is signalled, once, at its next
 * such entry (`signalled` keeps the address).
 * -D settings: the maps' sizes from cudaprobe/probe/bpfprog.py
 * (safepoint_numbers), which holds every default. */
#include <uapi/linux/ptrace.h>

#ifndef CP_MAX_RANGES
#error "CP_MAX_RANGES (capacity of `inside`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_SEEN
#error "CP_MAX_SEEN (capacity of `seen`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_PROCS
#error "CP_MAX_PROCS (capacity of `inside`) comes from bpfprog.py"
#endif
#ifndef CP_MAX_ARMED
#error "CP_MAX_ARMED (capacity of `armed`, `signalled`) comes from bpfprog.py"
#endif

struct code_ranges {
    u64 lo[CP_MAX_RANGES];
    u64 hi[CP_MAX_RANGES];
};

BPF_HASH(inside, u32, struct code_ranges, CP_MAX_PROCS);
BPF_HASH(seen, u64, u64, CP_MAX_SEEN);
BPF_HASH(armed, u32, u32, CP_MAX_ARMED);
BPF_HASH(signalled, u32, u64, CP_MAX_ARMED);

int on_entry(struct pt_regs *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 pid = id >> 32;
    struct code_ranges *r = inside.lookup(&pid);
    if (!r)
        return 0;	/* not a process being injected */
    u64 ret = 0;
    if (bpf_probe_read_user(&ret, sizeof ret, (void *)PT_REGS_SP(ctx)))
        return 0;
#pragma unroll
    for (int i = 0; i < CP_MAX_RANGES; i++) {
        if (!r->hi[i])
            break;
        if (ret >= r->lo[i] && ret < r->hi[i])
            return 0;
    }
    u32 tid = (u32)id;
    u32 *sig = armed.lookup(&tid);
    if (sig) {
        u32 s = *sig;
        u64 ip = PT_REGS_IP(ctx);
        armed.delete(&tid);
        signalled.update(&tid, &ip);
        bpf_send_signal_thread(s);
        return 0;
    }
    u64 zero = 0;
    u64 *n = seen.lookup_or_try_init(&id, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}
