"""CI must never pass by skipping: a test that lacks a server or program it
needs fails under CI=true. Every such skip goes through `conftest.unavailable`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from . import conftest

TESTS = Path(__file__).parent
# Any way to skip a test, written anywhere but in `conftest.unavailable`.
SKIPS = re.compile(r"pytest\.skip\(|pytest\.mark\.skip|skipif|importorskip|pytest\.xfail\(|mark\.xfail")


def test_unavailable_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="redis-server is missing"):
        conftest.unavailable("redis-server is missing")
    monkeypatch.setattr(conftest, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="redis-server is missing"):
        conftest.unavailable("redis-server is missing")


def test_no_test_skips_except_through_unavailable() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == Path(__file__).name:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SKIPS.search(line) and not (path.name == "conftest.py" and line.strip() == "pytest.skip(message)"):
                found.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    assert found == [], "skip through conftest.unavailable (fails under CI) instead:\n" + "\n".join(found)
