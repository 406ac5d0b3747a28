"""Where calls go: the reporters that --format picks (formats: table, jsonl,
json, csv, chrome), output files (files, capped), the status line beside
them on the terminal (status), sinks beside them (fanout,
metrics_sink, otlp, prometheus), the stats and memory views, the Chrome
trace checker and the bpftrace exporter.

May import: analysis, decode, probe, targets, catalogue.
"""
