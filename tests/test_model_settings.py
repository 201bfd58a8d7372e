"""ModelSettings: a typed, checked value; every problem listed at once; recorded and read back."""

from __future__ import annotations

import math
from typing import Any

import pytest

from planexec import ModelSettings, UsageError
from planexec.models import REASONING_EFFORTS


def test_every_field_set() -> None:
    settings = ModelSettings(
        temperature=0.3,
        max_tokens=512,
        top_p=0.9,
        stop=["END", "STOP"],  # type: ignore[arg-type]
        seed=7,
        reasoning_effort="low",
        extra={"service_tier": "flex"},
        timeout=30,
    )
    assert settings.stop == ("END", "STOP")
    assert settings.as_dict() == {
        "temperature": 0.3,
        "max_tokens": 512,
        "top_p": 0.9,
        "stop": ["END", "STOP"],
        "seed": 7,
        "reasoning_effort": "low",
        "extra": {"service_tier": "flex"},
        "timeout": 30,
    }
    assert ModelSettings.from_dict(settings.as_dict()) == settings


def test_nothing_set_records_nothing() -> None:
    assert ModelSettings().as_dict() == {}
    assert ModelSettings.from_dict({}) == ModelSettings()


def test_a_single_stop_string_is_one_sequence() -> None:
    assert ModelSettings(stop="###").stop == ("###",)  # type: ignore[arg-type]


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        ModelSettings(
            temperature=-0.1,
            max_tokens=0,
            top_p=1.5,
            stop=["", 3],  # type: ignore[arg-type]
            seed=True,
            reasoning_effort="extreme",  # type: ignore[arg-type]
            extra={"x": math.nan},
            timeout=0,
        )
    where = {p.where for p in caught.value.problems}
    assert where == {"temperature", "max_tokens", "top_p", "stop", "seed", "reasoning_effort", "extra.x", "timeout"}
    assert "from 0 to 2" in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("temperature", math.inf),
        ("temperature", "0.2"),
        ("top_p", -0.01),
        ("max_tokens", 1.5),
        ("max_tokens", -3),
        ("seed", 2**64),
        ("timeout", -1),
        ("timeout", math.nan),
        ("extra", {"": 1}),
        ("extra", ["not", "a", "mapping"]),
    ],
)
def test_invalid_values(field: str, value: Any) -> None:
    with pytest.raises(UsageError) as caught:
        ModelSettings(**{field: value})
    assert [p.where.split(".")[0] for p in caught.value.problems] == [field]


@pytest.mark.parametrize("effort", REASONING_EFFORTS)
def test_every_reasoning_effort_is_accepted(effort: Any) -> None:
    assert ModelSettings(reasoning_effort=effort).reasoning_effort == effort


def test_from_dict_names_unknown_keys_and_bad_values_with_their_place() -> None:
    with pytest.raises(UsageError) as caught:
        ModelSettings.from_dict({"temprature": 0.2, "top_p": 3, "max_tokens": "many"}, where="planner_settings")
    assert sorted(p.where for p in caught.value.problems) == [
        "planner_settings.max_tokens",
        "planner_settings.temprature",
        "planner_settings.top_p",
    ]


def test_from_dict_refuses_what_is_not_a_mapping() -> None:
    with pytest.raises(UsageError) as caught:
        ModelSettings.from_dict(["temperature", 0.2], where="judge_settings")
    assert caught.value.problems[0].where == "judge_settings"
