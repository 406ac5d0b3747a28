"""Where calls go, and everything shown: the reporters that --format picks
(formats: table, jsonl, json, csv, chrome), output files (files, capped), the
status line beside them on the terminal (status), sinks beside them (fanout,
metrics_sink, otlp, prometheus), the views (summary, stats, compare, memory,
doctor), the text helpers (text) and the bpftrace exporter. Rendering
happens here and nowhere else.

May import: analysis, decode, doctor, probe, targets, catalogue.
"""
