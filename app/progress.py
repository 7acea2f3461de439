"""Progress for the CLI's long operations, with rich, only for a person watching.

- stdout is a terminal: the spinner draws there, and whatever the command prints appears
  above it (rich redirects print while it draws);
- only stderr is a terminal (stdout piped to a file or a parser): the spinner draws on
  stderr and stdout stays exactly what the command wrote;
- neither: nothing is drawn at all.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def working(label: str) -> Iterator[None]:
    if sys.stdout.isatty():
        console, redirect = Console(), True
    elif sys.stderr.isatty():
        console, redirect = Console(stderr=True), False
    else:
        yield
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True, redirect_stdout=redirect, redirect_stderr=redirect) as progress:
        progress.add_task(label, total=None)
        yield
