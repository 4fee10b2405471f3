"""The shared argument checks (attnlab._checks): what each accepts, returns and says.

Every module's messages come from here, so one table pins the wording that the modules' own
tests rely on ("a positive int", "an int >= 0", "... or None")."""

from __future__ import annotations

import math
import re

import pytest

from attnlab._checks import (
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
    check_positive_number,
    check_rate,
    check_type,
    is_int,
    is_number,
)

NOT_INTS = [True, False, 1.0, 2.5, "3", None, math.nan]


@pytest.mark.parametrize("value", [0, 1, -7, 2**70])
def test_is_int_takes_ints(value):
    assert is_int(value) and is_number(value)


@pytest.mark.parametrize("value", NOT_INTS)
def test_is_int_refuses_bools_floats_and_others(value):
    assert not is_int(value)


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({}, "a positive int"),
        ({"minimum": 0}, "a non-negative int"),
        ({"minimum": 2}, "an int >= 2"),
        ({"minimum": 0, "plain": True}, "an int >= 0"),
        ({"minimum": 1, "plain": True}, "an int >= 1"),
        ({"minimum": None}, "an int"),
    ],
)
def test_check_int_says_what_it_expected(options, kind):
    minimum = options.get("minimum", 1)
    floor = -(10**9) if minimum is None else minimum
    assert check_int(floor, "n", **options) == floor
    assert check_optional_int(None, "n", **options) is None
    for bad in [*NOT_INTS, *([] if minimum is None else [minimum - 1])]:
        with pytest.raises(ValueError, match=f"^n: expected {kind}, got {re.escape(repr(bad))}$"):
            check_int(bad, "n", **options)
        if bad is not None:
            with pytest.raises(ValueError, match=f"^n: expected {kind} or None, got "):
                check_optional_int(bad, "n", **options)
    assert check_optional_int(floor, "n", **options) == floor


def test_check_bool_refuses_ints():
    assert check_bool(False, "flag") is False
    with pytest.raises(ValueError, match=r"^flag: expected a bool, got 1$"):
        check_bool(1, "flag")
    with pytest.raises(TypeError, match=r"^flag: expected a bool, got 'yes'$"):
        check_bool("yes", "flag", TypeError)


def test_check_type_returns_the_value_or_names_the_type_given():
    assert check_type(b"x", (bytes, bytearray), "model", "bytes") == b"x"
    marker = object()
    assert check_type(marker, object, "value", "anything") is marker
    with pytest.raises(TypeError, match=r"^config: expected a TrainConfig, got dict$"):
        check_type({}, str, "config", "a TrainConfig")


@pytest.mark.parametrize("value", [0, 0.5, 0.999])
def test_check_rate_takes_zero_to_below_one(value):
    assert check_rate(value, "p") == float(value)


@pytest.mark.parametrize("value", [1, 1.0, -0.1, math.nan, True, "0.1"])
def test_check_rate_refuses_the_rest(value):
    with pytest.raises(ValueError, match=r"^p: expected a number in \[0, 1\), got "):
        check_rate(value, "p")


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, None])
def test_check_positive_number_refuses_zero_nan_inf_and_bools(value):
    with pytest.raises(ValueError, match=r"^x: expected a positive number, got "):
        check_positive_number(value, "x")
    assert check_positive_number(3, "x") == 3.0


def test_check_choice_names_the_argument_and_lists_the_choices():
    assert check_choice("zh", ("en", "zh"), "lang") == "zh"
    assert check_choice(None, ("int8",), "quantize", none=True) is None
    with pytest.raises(ValueError, match=r"^lang: expected one of en, zh, got 'fr'$"):
        check_choice("fr", ("en", "zh"), "lang")
    with pytest.raises(ValueError, match=r"^quantize: expected one of int8 or None, got 'int4'$"):
        check_choice("int4", ("int8",), "quantize", none=True)
    with pytest.raises(ValueError, match=r"^to: expected one of a, b, got None$"):
        check_choice(None, ("a", "b"), "to")  # None only where it is allowed
