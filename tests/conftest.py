import os
import shutil
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


def conformance_dir(config: pytest.Config) -> Path | None:
    cache = getattr(config, "cache", None)
    return Path(cache.mkdir("aot-conformance")) if cache is not None else None


def conformance_results_dir(config: pytest.Config) -> Path | None:
    """Where tests/test_conformance.py records each case's result for the summary at the end of the
    run (under xdist, each worker writes its own cases' files; the controller reads them all)."""
    directory = conformance_dir(config)
    return directory / "results" if directory is not None else None


def pytest_sessionstart(session: pytest.Session) -> None:
    directory = conformance_results_dir(session.config)
    if directory is not None and not hasattr(session.config, "workerinput"):  # the controller, not a worker
        shutil.rmtree(directory, ignore_errors=True)


# Seconds of setup, call and teardown per test file, summed over the xdist workers (the controller
# receives every worker's reports): where a pass's time goes, beside --durations' slowest tests.
FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + report.duration


def report_file_seconds(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """With --durations, the files that took the most time (all their tests, every phase)."""
    if not config.getoption("durations", None) or not FILE_SECONDS or hasattr(config, "workerinput"):
        return
    total = sum(FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"seconds per test file ({total:.0f} s summed over workers)")
    for path, seconds in sorted(FILE_SECONDS.items(), key=lambda item: -item[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f}s {seconds / total:6.1%}  {path}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    report_file_seconds(terminalreporter, config)
    directory = conformance_results_dir(config)
    if directory is None or not directory.is_dir() or hasattr(config, "workerinput"):
        return
    from tests import conformance as cf  # imports aot and onnx: only when conformance cases ran

    summary = cf.recorded_summary(directory)
    if summary is None:
        return
    path = directory.parent / "summary.txt"
    path.write_text(summary + "\n")
    terminalreporter.write_sep("=", "ONNX conformance")
    listing = False
    for line in summary.splitlines():
        # Show counts, failures and the unsupported-op tally; skip the one-line-per-case lists.
        if not line.startswith("  "):
            listing = line.startswith("unsupported (")
        elif listing and "/" in line.split(":", 1)[0]:
            continue
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(every unsupported case with its missing ops: {path})")
