"""The doctor's counted words read as English."""

from pgbaton.doctor.findings import plural


def test_plural_of_index_is_indexes() -> None:
    assert plural(13, "index") == "13 indexes"
    assert plural(1, "index") == "1 index"
    assert plural(2, "running job") == "2 running jobs"
