"""The run loops that tie probe, decode and output together: one lifecycle
(run: attach, release the command, wait, detach), used by trace, stats,
memory and serve; what every probing command does before and after it
(probing: the request planned, the machine made ready, the processes let
go of); each command's session put together (tracing, stats, memory,
collectives); following processes (follow) and stop signals (signals).

May import: output, analysis, decode, probe, targets, catalogue.
"""
