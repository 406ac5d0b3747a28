"""Where calls go: the reporters that --format picks (formats: table, jsonl,
csv, chrome), output files (files, capped), sinks beside them (fanout,
metrics_sink, otlp, prometheus), the stats and memory views, the Chrome
trace checker and the bpftrace exporter.

May import: analysis, decode, probe, targets, catalogue.
"""
