"""Which processes and files: --pid, --comm and `-- COMMAND` (selection,
launch), what they map (procmaps), the CUDA libraries (libs) and the one ELF
reader (headers in elf, symbols in elfsyms), and the machine checks tracing
depends on (environment).

May import: catalogue.
"""
