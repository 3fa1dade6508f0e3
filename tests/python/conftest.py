"""pytest hooks for the package's tests."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A reason for skipping shared by many tests (no GPU here) gets one line in -rs's summary: pytest
    folds skips by (file, line, reason), so every skip is reported at the tests' folder."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        report.longrepr = (str(item.path.parent), None, report.longrepr[2])
