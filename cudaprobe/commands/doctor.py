"""cudaprobe doctor: will tracing work here, and what to fix if not."""

from __future__ import annotations

import json
import sys

import click

from cudaprobe.doctor.checks import run_checks, to_json, tracing_works
from cudaprobe.output.doctor_view import render_checks
from cudaprobe.output.table import make_console


@click.command("doctor")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="A table, or one JSON object.")
@click.option("--json", "as_json", is_flag=True, hidden=True,
              help="The same as `-f json` (deprecated).")
@click.option("--lib", "libs", multiple=True, metavar="PATH",
              help="Check this CUDA library instead of the ones found. Repeatable.")
def doctor_command(fmt, as_json, libs) -> None:
    """Check that this machine can trace CUDA calls, and say how to fix what
    is missing: privileges, kernel and its config, BTF, tracefs, kernel
    headers, bcc, bpftrace, how probes attach, the uretprobe/seccomp hazard of
    Linux 6.11-6.13, and the CUDA libraries with the catalogue functions each
    defines. Changes nothing. Exit status 0 when tracing will work, 1 when not.

    \b
    Examples:
      sudo cudaprobe doctor
      cudaprobe doctor -f json | jq '.checks[] | select(.status != "ok")'
      sudo cudaprobe doctor --lib /opt/app/lib/libcudart.so.12
    """
    checks = run_checks(list(libs) or None)
    if as_json or fmt == "json":
        click.echo(json.dumps(to_json(checks), indent=2))
    else:
        render_checks(checks, make_console(sys.stdout))
    sys.exit(0 if tracing_works(checks) else 1)
