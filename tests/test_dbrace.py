"""``retry_schema_race``: a lost creation race is tried again (by tenacity), anything else is
raised at once, and a store opened without a race never imports tenacity."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from brain.dbrace import retry_schema_race


def _failing(errors: list[Exception]):
    calls: list[int] = []

    def action() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "schema"

    return action, calls


def _lost() -> OperationalError:
    return OperationalError("CREATE TABLE runs", {}, Exception("table runs already exists"))


def test_a_lost_race_is_tried_again_until_the_winners_schema_is_seen():
    dup = IntegrityError("INSERT", {}, Exception('duplicate key value violates "pg_type"'))
    action, calls = _failing([_lost(), dup])
    assert retry_schema_race(action) == "schema"
    assert len(calls) == 3


def test_any_other_failure_is_raised_at_once():
    locked = OperationalError("CREATE TABLE runs", {}, Exception("disk I/O error"))
    action, calls = _failing([locked])
    with pytest.raises(OperationalError, match="disk I/O error"):
        retry_schema_race(action)
    assert len(calls) == 1


def test_a_race_lost_every_time_ends_in_the_last_error_after_all_attempts():
    action, calls = _failing([_lost() for _ in range(5)])
    with pytest.raises(OperationalError, match="already exists"):
        retry_schema_race(action, attempts=3)
    assert len(calls) == 3


def test_opening_a_store_imports_no_tenacity(tmp_path: Path):
    code = (
        "import sys; from pilot.store.event_store import EventStore; "
        f"EventStore('sqlite:///{tmp_path / 'x.db'}'); "
        "print('tenacity' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
