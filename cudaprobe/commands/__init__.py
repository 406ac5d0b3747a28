"""The click commands, one module each: parse options, call a session or a
library function, print. Thin by design; the logic lives below.

May import: every other subpackage.
"""
