"""Will tracing work on this machine: `cudaprobe doctor`'s checks (checks),
each a verdict and the fix, changing nothing. A side room of the data path:
it asks what targets and probe will need, and output shows its report.

May import: probe, targets, catalogue.
"""
