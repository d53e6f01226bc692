"""Numbers typed by users (rates, and the command line's counts and seconds): ASCII
digits only, a limit's edges judged as out of range, and nothing but InvalidArgument (or
click's usage error) for any text at all."""

from __future__ import annotations

import math
import re
import unicodedata

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import pgbaton
from pgbaton._checks import parse_number, parse_whole
from pgbaton.cli import main
from pgbaton.flow import Rate, parse_rate
from pgbaton.limits import (
    INT4_MAX,
    INT4_MIN,
    MAX_RATE_LIMIT,
    MAX_RATE_PERIOD_SECONDS,
    MIN_RATE_PERIOD_SECONDS,
)

UNITS = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
# Digits of every script but ASCII's, which int() and \d take as digits.
OTHER_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


@given(st.integers(min_value=-(10**40), max_value=10**40), st.sampled_from(sorted(UNITS)))
def test_a_rate_is_taken_exactly_within_its_limits(limit: int, unit: str) -> None:
    """1 to MAX_RATE_LIMIT starts per window pass; every other whole number, negative
    ones included, is refused as out of range, naming the bound."""
    text = f"{limit}/{unit}"
    if 1 <= limit <= MAX_RATE_LIMIT:
        assert parse_rate(text) == Rate(limit, UNITS[unit])
        return
    with pytest.raises(pgbaton.InvalidArgument) as caught:
        parse_rate(text)
    bound = "at least 1" if limit < 1 else f"at most {MAX_RATE_LIMIT:,}"
    assert f"the limit must be {bound}" in str(caught.value) or "digits" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [("0/s", "the limit must be at least 1"), ("-1/s", "the limit must be at least 1"),
     ("+0/s", "the limit must be at least 1"), (f"{INT4_MIN}/s", "at least 1"),
     (f"{MAX_RATE_LIMIT + 1}/s", "at most 10,000"), (f"{INT4_MAX}/s", "at most 10,000"),
     (f"{INT4_MAX + 1}/s", "at most 10,000"), ("9" * 5000 + "/s", "5,000 digits"),
     ("1/0.0009s", "out of range"), ("1/0s", "out of range"), ("1/8d", "out of range"),
     ("1/604800.001s", "out of range"), ("1/" + "9" * 400 + "d", "out of range"),
     ("\uff15/s", "'\uff15' (U+FF15 FULLWIDTH DIGIT FIVE)"), ("1/\uff15s", "U+FF15"),
     ("\u0661\u0660/s", "U+0661 ARABIC-INDIC DIGIT ONE"), ("1/s\u3000", "U+3000 IDEOGRAPHIC SPACE"),
     ("1_0/s", "not understood"), ("1/1e3s", "not understood"), ("- 1/s", "not understood")],
)
def test_rates_at_and_past_every_limit(text: str, message: str) -> None:
    with pytest.raises(pgbaton.InvalidArgument, match=re.escape(message)) as caught:
        parse_rate(text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "rate"),
    [(f"{MAX_RATE_LIMIT}/s", Rate(MAX_RATE_LIMIT, 1.0)), ("1/0.001s", Rate(1, 0.001)),
     ("1/1ms", Rate(1, MIN_RATE_PERIOD_SECONDS)), ("1/7d", Rate(1, MAX_RATE_PERIOD_SECONDS)),
     ("+3/s", Rate(3, 1.0)), ("0003/2min", Rate(3, 120.0)), (" 1 / s \n", Rate(1, 1.0))],
)
def test_rates_at_their_limits_are_taken(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate


@given(st.text(), OTHER_DIGITS)
def test_a_digit_of_another_script_is_refused_by_name(text: str, digit: str) -> None:
    """Wherever it stands, the first character outside ASCII is named, with its code."""
    for candidate in (f"{digit}/s", f"1{digit}/s", f"1/{digit}s", text + digit):
        first = next(c for c in candidate if not c.isascii())
        with pytest.raises(pgbaton.InvalidArgument) as caught:
            parse_rate(candidate)
        assert f"U+{ord(first):04X}" in str(caught.value), candidate
        assert unicodedata.name(first, "") in str(caught.value)


@given(st.text(max_size=50) | st.from_regex(r"[+-]?[0-9]{1,40}/[0-9.]{0,40}[a-z]{0,8}"))
def test_any_text_is_a_rate_or_one_line_of_invalid_argument(text: str) -> None:
    try:
        rate = parse_rate(text)
    except pgbaton.InvalidArgument as error:
        refusal = str(error)
    else:
        refusal = ""
    if refusal:
        assert "\n" not in refusal
        return
    assert rate is not None and 1 <= rate.limit <= MAX_RATE_LIMIT
    assert MIN_RATE_PERIOD_SECONDS <= rate.period <= MAX_RATE_PERIOD_SECONDS


@given(st.integers(min_value=1 - 10**30, max_value=10**30 - 1))
def test_whole_numbers_of_up_to_30_digits_round_trip(number: int) -> None:
    assert parse_whole("n", str(number)) == number
    with pytest.raises(pgbaton.InvalidArgument, match="out of range: 31 digits"):
        parse_whole("n", str(10**30 + abs(number)))


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_finite_numbers_round_trip(number: float) -> None:
    assert parse_number("x", repr(number)) == number


@pytest.mark.parametrize("text", ["\uff15", "1_000", "1.5", "", " ", "0x10", "1e3", "\uff19" * 3])
def test_what_is_no_whole_number_is_refused(text: str) -> None:
    with pytest.raises(pgbaton.InvalidArgument, match=r"^n "):
        parse_whole("n", text)


@pytest.mark.parametrize(
    "text", ["nan", "inf", "-Infinity", "1e400", "1_0.5", "\uff15.\uff15", "."])
def test_what_is_no_finite_number_is_refused(text: str) -> None:
    with pytest.raises(pgbaton.InvalidArgument, match=r"^x "):
        parse_number("x", text)
    assert math.isfinite(parse_number("x", "1e308"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["enqueue", "t", "--delay", "\uff15"], "'--delay': it holds '\uff15' (U+FF15"),
     (["enqueue", "t", "--delay", "nan"], "'--delay': it must be a number, got 'nan'"),
     (["enqueue", "t", "--priority", "\uff11"], "'--priority': it holds '\uff11'"),
     (["enqueue", "t", "--max-attempts", "1_0"], "it must be a whole number, got '1_0'"),
     (["show", "\uff14\uff12"], "'JOB_ID': it holds '\uff14'"),
     (["queue", "limit", "q", "--concurrency", "\uff18"], "--concurrency: '\uff18' holds '\uff18'"),
     (["queue", "limit", "q", "--rate", "-1/s"], "the limit must be at least 1"),
     (["queue", "aging", "q", "--every", "inf", "--cap", "3"], "'--every': it must be"),
     (["worker", "m:app", "--lease", "\uff13\uff10"], "'--lease': it holds '\uff13'"),
     (["worker", "m:app", "--claim-ahead", "-1"], "must be 'auto' or a whole number >= 0"),
     (["worker", "m:app", "--claim-ahead", "\uff13"], "'--claim-ahead': must be 'auto'"),
     (["worker", "m:app", "--connect-timeout", "nan"], "'--connect-timeout': it must be"),
     (["prune", "--older-than", "1e999"], "'--older-than': it is out of range"),
     (["doctor", "--max-dead-ratio", "nan"], "'--max-dead-ratio': it must be")],
)
def test_the_command_line_takes_numbers_in_ascii_only(argv: list[str], message: str) -> None:
    """Refused as the command line is read, before any database is looked for."""
    done = CliRunner().invoke(main, argv, env={"PGBATON_DSN": "postgresql://x@127.0.0.1:1/x"})
    assert done.exit_code != 0
    assert message in done.output, done.output
