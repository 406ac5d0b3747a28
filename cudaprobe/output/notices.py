"""What cudaprobe says on stderr beside its output: one dim line a notice,
and, at the start of a session, what is probed."""

from __future__ import annotations

import sys
from typing import Callable

from rich.text import Text

from cudaprobe.catalogue.count import count_text
from cudaprobe.output.table import make_console
from cudaprobe.output.text import escape
from cudaprobe.probe.plan import ProbePlan


def announce(plan: ProbePlan, notes: list[str], doing: str) -> Callable[[str], None]:
    """Say, on stderr, `notes` (what making the machine ready took, what the
    targets need said) and what is probed (`doing`: "tracing", ...). Returns
    the function that says further things the same way."""
    err = make_console(sys.stderr)

    def notify(message: str) -> None:
        # names and paths in it are the traced processes': escaped
        err.print(Text(f"cudaprobe: {escape(message)}", style="dim"))

    for note in notes:
        notify(note)
    paths = sorted({a.path for a in plan.attachments})
    probed = count_text({a.probe.function.name for a in plan.attachments},
                        {a.probe.symbol for a in plan.attachments})
    notify(f"{doing} {probed} in {', '.join(paths)}" if paths
           else "no CUDA code mapped yet: probes go in as it is loaded")
    return notify
