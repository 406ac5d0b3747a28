"""Calls to numbers: the end-of-trace summary, per-function statistics from
the kernel maps and their comparison, memory accounting, and the metrics any
exporter reads; NCCL's collectives per rank, and their stragglers (nccl).

May import: decode, probe, targets, catalogue.
"""
