"""cudaprobe: live CUDA API tracing with eBPF uprobes."""

__version__ = "0.1.0"
