"""Calls to numbers: the end-of-trace summary, per-function statistics from
the kernel maps and their comparison, memory accounting, and the metrics any
exporter reads; NCCL's operations per size and rank, and the ranks' waits
(nccl, nccl_ops, nccl_shapes, nccl_waits).

May import: decode, probe, targets, catalogue.
"""
