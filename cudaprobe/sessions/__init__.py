"""The run loops that tie probe, decode and output together: one lifecycle
(run: attach, release the command, wait, detach), used by trace, stats,
memory and serve; following processes (follow) and stop signals (signals).

May import: output, analysis, decode, probe, targets, catalogue.
"""
