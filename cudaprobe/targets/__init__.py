"""Which processes and files: --pid, --comm and `-- COMMAND` (selection,
launch), what they map (procmaps), the CUDA libraries and their ELF symbols
(libs, elfscan, elfsyms), and the machine checks tracing depends on
(environment).

May import: catalogue.
"""
