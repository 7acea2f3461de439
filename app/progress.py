"""Progress for the CLI's long operations, with rich, on stderr.

On stderr and transient, so stdout stays exactly what scripts parse (JSON, JSON Lines);
when stderr is not a terminal rich draws nothing at all."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def working(label: str) -> Iterator[None]:
    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True, redirect_stdout=False, redirect_stderr=False) as progress:
        progress.add_task(label, total=None)
        yield
