"""The kernel side: the BPF program and its settings (bpfprog, bpf/), which
functions are probed at which offsets (plan), the loaded program and its
parts (tracer: loading in load, attaching and detaching in attach with
uprobe_multi and perf_uprobe, the counting maps in maps, the calls under way
in pairing), the ring buffer and the event layout (ringbuf, event), and
keeping the kernel clean (sweep, cleanup).

May import: targets, catalogue.
"""
