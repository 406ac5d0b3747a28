"""Bytes to calls: ring-buffer records and raw events decoded into Calls
(calls, records), kernel names (handles, symbolize, demangle), call sites
(callsites) and which runtime call made which driver calls (nesting).

Pure Python over bytes: no root, no bcc. May import: probe (the event
layout and the plan), targets, catalogue.
"""
