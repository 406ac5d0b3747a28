"""Runs `cudaprobe serve` with CUPTI's recording left on between --duty's slices
(GpuTimeAttach's pause and resume made no-ops): a diagnosis, beside the same
run with them, of what switching CUPTI's kinds off and on does to a job."""
from cudaprobe.cli import main
from cudaprobe.sessions.gputime_attach import GpuTimeAttach

GpuTimeAttach.pause = GpuTimeAttach.resume = lambda self, *args, **kwargs: None

if __name__ == "__main__":
    raise SystemExit(main())
