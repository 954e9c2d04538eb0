"""Progress of long steps (import, passes, lowering, planning, code generation, builds, runs).

Library code only *announces* steps on a `Progress` it was given; the default, `SILENT`, does
nothing, so `aot.compile(...)` prints nothing. The command line passes a `StepReporter`, which
shows a spinner on stderr when stderr is a terminal and, with `--verbose`, one line per finished
step with its elapsed time (also when stderr is not a terminal).

A step lasts from `start(name)` until the next `start` or `finish()`, so a pipeline announces its
stages with one line each and no re-indented blocks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from aot.terminal import printable


class Progress:
    """The hook library code calls. This base class is silent."""

    def start(self, step: str) -> None:
        """Begin `step` (ending the step in progress, if any)."""

    def finish(self) -> None:
        """End the step in progress, if any."""

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """`with progress.step(name): ...` for one step around a block."""
        self.start(name)
        try:
            yield
        finally:
            self.finish()


SILENT = Progress()


class StepReporter(Progress):
    """Steps on stderr: a transient spinner on a terminal (`live`), timing lines when `verbose`."""

    def __init__(self, *, live: bool, verbose: bool, stream: TextIO | None = None) -> None:
        self.live = live
        self.verbose = verbose
        self.stream = stream or sys.stderr
        self.timings: list[tuple[str, float]] = []
        self.current: str | None = None
        self._started = 0.0
        self._created = time.perf_counter()
        self._status: Any = None

    @classmethod
    def for_cli(cls, verbose: bool) -> StepReporter:
        isatty = getattr(sys.stderr, "isatty", None)
        return cls(live=bool(isatty and isatty()), verbose=verbose)

    def start(self, step: str) -> None:
        self._end_step()
        # Steps name targets and files, which may hold terminal control characters.
        step = printable(step)
        self.current = step
        self._started = time.perf_counter()
        if self.live:
            from rich.text import Text

            if self._status is None:
                from rich.console import Console

                # A Text, not a str: rich would read "[bold]" in a target's name as markup.
                self._status = Console(file=self.stream).status(Text(f"{step} ..."), spinner="dots")
                self._status.start()
            else:
                self._status.update(Text(f"{step} ..."))

    def finish(self) -> None:
        # The spinner stops between steps, so that what the command prints next is not interleaved
        # with it (rich would re-wrap it while live).
        self._stop_spinner()
        self._end_step()

    def _end_step(self) -> None:
        if self.current is None:
            return
        elapsed = time.perf_counter() - self._started
        self.timings.append((self.current, elapsed))
        if self.verbose:
            self._line(f"aot: {self.current}: {elapsed:.2f} s")
        self.current = None

    def close(self, failed: bool = False) -> None:
        """End the run: stop the spinner; with `verbose`, say which step failed or the total time."""
        step = self.current
        elapsed = time.perf_counter() - self._started
        self.current = None
        self._stop_spinner()
        if not self.verbose:
            return
        if failed and step is not None:
            self._line(f"aot: {step}: failed after {elapsed:.2f} s")
        elif not failed:
            if step is not None:
                self.timings.append((step, elapsed))
                self._line(f"aot: {step}: {elapsed:.2f} s")
            if self.timings:
                self._line(f"aot: total: {time.perf_counter() - self._created:.2f} s")

    def stop(self) -> None:
        """Stop the spinner (before an error message), keeping the step for `close`."""
        self._stop_spinner()

    def _stop_spinner(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _line(self, text: str) -> None:
        text = printable(text)
        if self._status is not None:
            self._status.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)
