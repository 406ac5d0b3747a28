"""The kernel side: the BPF program and its settings (bpfprog, bpf/), which
functions are probed at which offsets (plan), attaching (tracer, uprobe_multi,
perf_uprobe), the ring buffer and the event layout (ringbuf, event), and
keeping the kernel clean (sweep, cleanup).

May import: targets, catalogue.
"""
