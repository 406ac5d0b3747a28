"""cudaprobe completion: the shell completion script (click's), and what -e completes."""

from __future__ import annotations

import os

import click
from click.shell_completion import CompletionItem, get_completion_class

from cudaprobe.catalogue.functions import CATEGORIES, FUNCTIONS
from cudaprobe.probe.plan import ALL

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_CUDAPROBE_COMPLETE"  # the variable click's scripts set when they ask


def complete_events(ctx: click.Context, param: click.Parameter,
                    incomplete: str) -> list[CompletionItem]:
    """-e's values: `all`, the categories and the function names, for the last
    item of a comma-separated list, after a `!` too (`memory,!cudaF` ->
    `memory,!cudaFree`, ...)."""
    head, _, item = incomplete.rpartition(",")
    head += "," if head else ""
    if item.startswith("!"):
        head, item = head + "!", item[1:]
    names = (ALL, *CATEGORIES, *sorted({f.name for f in FUNCTIONS}))
    return [CompletionItem(_quoted(head + name)) for name in names if name.startswith(item)]


def _quoted(value: str) -> str:
    """A value with a `!`, single-quoted for bash and zsh: inserted bare, the
    `!` would be history expansion when the line runs."""
    shell = os.environ.get(COMPLETE_VAR, "")
    if "!" in value and shell.startswith(("bash", "zsh")):
        return f"'{value}'"
    return value


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL: commands, options, and -e's
    function and category names.

    \b
    Examples:
      eval "$(cudaprobe completion bash)"            # in ~/.bashrc
      eval "$(cudaprobe completion zsh)"             # in ~/.zshrc
      cudaprobe completion fish > ~/.config/fish/completions/cudaprobe.fish
    """
    root = ctx.find_root()
    complete = get_completion_class(shell)(root.command, {}, root.info_name or "cudaprobe",
                                           COMPLETE_VAR)
    click.echo(complete.source())
