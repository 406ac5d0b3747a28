"""The `cudaprobe` command group and its one error boundary."""

from __future__ import annotations

import sys
import traceback

import click

from . import __version__
from .commands.doctor import doctor_command
from .commands.export import export_group
from .commands.list import list_command
from .commands.memory import memory_command
from .commands.stats import stats_command
from .commands.trace import trace_command
from .errors import CudaprobeError


class CudaprobeGroup(click.Group):
    """Turns CudaprobeError into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except CudaprobeError as e:
            if ctx.obj and ctx.obj.get("verbose"):
                traceback.print_exc()
            click.echo(f"cudaprobe: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=CudaprobeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cudaprobe")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Trace CUDA runtime and driver API calls live, with eBPF uprobes.

    \b
    Examples:
      sudo cudaprobe trace -- ./my_app --its-args
      sudo cudaprobe trace --lib /usr/local/cuda/lib64/libcudart.so
      sudo cudaprobe trace --events memory,kernel --format jsonl -o calls.jsonl -- python train.py
      cudaprobe list --events transfer
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


main.add_command(trace_command)
main.add_command(list_command)
main.add_command(stats_command)
main.add_command(memory_command)
main.add_command(export_group)
main.add_command(doctor_command)
