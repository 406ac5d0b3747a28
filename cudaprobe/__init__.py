"""cudaprobe: live CUDA API tracing with eBPF uprobes."""

import time

__version__ = "0.1.0"

# for the summary's startup_s: process start to probes attached
STARTED = time.monotonic()
