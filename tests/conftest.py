import os
import sys
from pathlib import Path

import pytest

# Tests import their helpers as `tests.helpers`; make the repo root importable under xdist too.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sample_parametrised(config: pytest.Config, items: list[pytest.Item], every: int) -> None:
    """Keep every `every`-th case (the 1st, (every+1)-th, ...) of each parametrised test function, in
    collection order, and every unparametrised test: a deterministic sample for slow passes."""
    seen: dict[str, int] = {}
    kept, dropped = [], []
    for item in items:
        if getattr(item, "callspec", None) is None:
            kept.append(item)
            continue
        function = item.nodeid.split("[", 1)[0]
        index = seen.get(function, 0)
        seen[function] = index + 1
        (kept if index % every == 0 else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow run only when asked for, e.g. `-m slow` or `-m "slow or not slow"`.

    $AOT_TEST_SAMPLE=N runs every N-th case of each parametrised test (see sample_parametrised)."""
    every = int(os.environ.get("AOT_TEST_SAMPLE", "1") or "1")
    if every > 1:
        sample_parametrised(config, items, every)
    if "slow" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="slow; select with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def conformance_summary_path(config: pytest.Config) -> Path | None:
    """Where tests/test_conformance.py leaves its summary for the end of the run (under xdist a
    passing test's output is not shown)."""
    cache = getattr(config, "cache", None)
    return Path(cache.mkdir("aot-conformance")) / "summary.txt" if cache is not None else None


def pytest_sessionstart(session: pytest.Session) -> None:
    path = conformance_summary_path(session.config)
    if path is not None and not hasattr(session.config, "workerinput"):  # the controller, not a worker
        path.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    path = conformance_summary_path(config)
    if path is None or not path.is_file():
        return
    terminalreporter.write_sep("=", "ONNX conformance")
    listing = False
    for line in path.read_text().splitlines():
        # Show counts, failures and the unsupported-op tally; skip the one-line-per-case lists.
        if not line.startswith("  "):
            listing = line.startswith("unsupported (")
        elif listing and "/" in line.split(":", 1)[0]:
            continue
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(every unsupported case with its missing ops: {path})")
