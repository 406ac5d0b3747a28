"""The `cudaprobe` command group and its one error boundary."""

from __future__ import annotations

import errno
import importlib
import io
import os
import sys
import traceback
from typing import Any, NoReturn

import click

from cudaprobe import __version__
from cudaprobe.errors import CudaprobeError, OutputFailed

NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())
# what a write to stdout or a file fails with while running (an OSError without
# a file name: open() and the like carry theirs)
WRITE_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EBADF)


# each command's module, imported only when the command runs (or `--help` lists
# them all): `cudaprobe trace` does not load serve's HTTP server or doctor's checks
COMMANDS = {
    "completion": ("cudaprobe.commands.completion", "completion_command"),
    "doctor": ("cudaprobe.commands.doctor", "doctor_command"),
    "export": ("cudaprobe.commands.export", "export_group"),
    "list": ("cudaprobe.commands.list", "list_command"),
    "memory": ("cudaprobe.commands.memory", "memory_command"),
    "serve": ("cudaprobe.commands.serve", "serve_command"),
    "stats": ("cudaprobe.commands.stats", "stats_command"),
    "trace": ("cudaprobe.commands.trace", "trace_command"),
}


class CudaprobeGroup(click.Group):
    """The one error boundary: a CudaprobeError, a usage error (bad option,
    value or command) and a bug alike become one line on stderr and exit
    code 2; tracebacks only with -v. Its commands are COMMANDS."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), name)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if sys.stdout is None:  # started with stdout closed (`>&-`): writing it fails
            sys.stdout = ClosedStdout()
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except BrokenPipeError:  # --help, --version: their reader has gone
            _reader_gone()
        except OutputFailed as e:  # --help, --version with stdout closed
            _fail(str(e), e.exit_code)
        except OSError as e:  # --help, --version to a full disk or a closed stdout
            if e.errno not in WRITE_ERRNOS or e.filename is not None:
                raise
            _no_stdout()
            _fail(f"writing output failed: {e.strerror}", OutputFailed.exit_code)
        except SystemExit:
            _flush_stdout()  # a command's own exit status (trace -- COMMAND)
            raise
        except NO_ARGS_IS_HELP as e:  # bare `cudaprobe`: the help, as before click 8.2
            click.echo(e.ctx.get_help())
            rv = 0
        except click.ClickException as e:
            where = e.ctx.command_path if getattr(e, "ctx", None) else "cudaprobe"
            hint = f" (see `{where} --help`)" if isinstance(e, click.UsageError) else ""
            _fail(" ".join(e.format_message().split()) + hint, 2)
        except click.Abort:  # Ctrl-C before tracing started
            _fail("interrupted", 130)
        _flush_stdout()
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OutputFailed as e:
            if e.errno == errno.EPIPE:
                _reader_gone()
            _fail(str(e), e.exit_code)
        except CudaprobeError as e:
            if _verbose(ctx):
                traceback.print_exc()
            _fail(str(e), e.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            _reader_gone()
        except OSError as e:
            if e.errno not in WRITE_ERRNOS or e.filename is not None:
                raise
            _fail(f"writing output failed: {e.strerror}", OutputFailed.exit_code)
        except Exception as e:
            if _verbose(ctx):
                traceback.print_exc()
            detail = " ".join(str(e).split())
            _fail(f"internal error: {type(e).__name__}: {detail} (a bug: run with -v for "
                  "the traceback, and report it)", 2)


class ClosedStdout(io.TextIOBase):
    """sys.stdout when cudaprobe started with fd 1 closed: Python leaves it None
    and click then writes nothing, quietly; a write here fails as a write to
    the closed descriptor would. (Output streams say so themselves:
    output.files.stdout_closed.)"""

    closed_at_start = True

    def write(self, text: str) -> int:
        raise OutputFailed("writing stdout failed: stdout is closed", errno.EBADF)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


def _no_stdout() -> None:
    """Nothing more for stdout: the interpreter's last flush is then quiet."""
    if isinstance(sys.stdout, ClosedStdout):
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


def _verbose(ctx: click.Context) -> bool:
    """-v, which the group's callback has put in ctx.obj by the time anything fails."""
    return bool(ctx.obj and ctx.obj.get("verbose"))


def _reader_gone() -> NoReturn:
    """stdout's reader has seen enough (`| head`): a quiet exit, as other tools
    make, with stdout on /dev/null so that the interpreter's last flush is quiet."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.exit(0)


def _flush_stdout() -> None:
    """What click and rich left in sys.stdout's buffer, written now so that a
    failure is said here, not by the interpreter at exit."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()
    except OSError as e:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        _fail(f"writing output failed: {e.strerror}", OutputFailed.exit_code)


def _fail(message: str, code: int) -> NoReturn:
    # a message may name a traced process, its paths or what it wrote: escaped
    from cudaprobe.output.text import escape  # noqa: PLC0415 - it loads rich: only to fail

    click.echo(f"cudaprobe: {escape(message)}", err=True)
    sys.exit(code)


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
