"""Bindings: ``compile_args(...).resolve(outputs)`` fills earlier outputs into arguments."""

from __future__ import annotations

from typing import Any

import pytest

from planexec.plan import BindingError, Ref, compile_args, render_text

OUTPUTS: dict[str, Any] = {
    "rows": [{"name": "ada", "age": 36}, {"name": "bob", "age": 41}, {"name": "cy", "age": None}],
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "nothing": None,
    "title": "Report",
    "meta": {"owner": {"email": "a@example.org"}, "tags": ["x", "y"], "0": "zero-key"},
}


def resolve(args: dict[str, Any], outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    compiled = compile_args(args)
    assert compiled.problems == ()
    return compiled.resolve(OUTPUTS if outputs is None else outputs)


# -- whole-value bindings keep their type ------------------------------------------------------


@pytest.mark.parametrize("step_id", ["rows", "count", "ratio", "flag", "nothing", "title", "meta"])
def test_whole_value_binding_keeps_type(step_id: str) -> None:
    value = resolve({"x": "${" + step_id + "}"})["x"]
    assert value == OUTPUTS[step_id]
    assert type(value) is type(OUTPUTS[step_id])


def test_whole_value_binding_is_the_output_itself() -> None:
    assert resolve({"x": "${rows}"})["x"] is OUTPUTS["rows"]


def test_whole_value_none_is_kept_not_rendered() -> None:
    assert resolve({"x": "${nothing}"}) == {"x": None}
    assert resolve({"x": "${rows.2.age}"}) == {"x": None}


# -- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "expected"),
    [
        ("${rows.0}", {"name": "ada", "age": 36}),
        ("${rows.1.name}", "bob"),
        ("${rows.0.age}", 36),
        ("${rows.-1.name}", "cy"),
        ("${rows.-3.name}", "ada"),
        ("${meta.owner.email}", "a@example.org"),
        ("${meta.tags.1}", "y"),
        ("${meta.tags.-2}", "x"),
        ("${meta.0}", "zero-key"),
    ],
)
def test_path_into_fields_and_items(binding: str, expected: Any) -> None:
    assert resolve({"x": binding})["x"] == expected


def test_refs_and_their_locations_are_listed() -> None:
    compiled = compile_args({"a": "${rows.0.name}", "b": ["x", {"c": "n=${count}"}]})
    assert compiled.refs == (
        (("a",), Ref(step_id="rows", path=("0", "name"))),
        (("b", 1, "c"), Ref(step_id="count", path=())),
    )
    assert str(Ref(step_id="rows", path=("0", "name"))) == "${rows.0.name}"


# -- text rendering ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Found ${count} rows", "Found 3 rows"),
        ("Title: ${title}!", "Title: Report!"),
        ("ratio=${ratio}", "ratio=0.5"),
        ("flag=${flag}", "flag=true"),
        ("none=${nothing}", "none=null"),
        ("tags=${meta.tags}", 'tags=["x","y"]'),
        ("owner=${meta.owner}", 'owner={"email":"a@example.org"}'),
        ("${rows.0.name} and ${rows.1.name}", "ada and bob"),
        ("${count}${count}", "33"),
        (" ${title}", " Report"),
        ("${title} ", "Report "),
    ],
)
def test_bindings_inside_longer_strings_render_as_text(template: str, expected: str) -> None:
    assert resolve({"x": template})["x"] == expected


def test_render_text() -> None:
    assert render_text("plain") == "plain"
    assert render_text(12) == "12"
    assert render_text(False) == "false"
    assert render_text(None) == "null"
    assert render_text({"a": [1, 2]}) == '{"a":[1,2]}'
    assert render_text(["é"]) == '["é"]'


def test_text_rendering_keeps_unicode() -> None:
    assert resolve({"x": "name: ${who}"}, {"who": ["Zoë"]})["x"] == 'name: ["Zoë"]'


# -- the $${ escape ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("$${count}", "${count}"),
        ("cost: $${x} and ${count}", "cost: ${x} and 3"),
        ("$${", "${"),
        ("a $${ b", "a ${ b"),
        ("$$${count}", "$${count}"),
    ],
)
def test_escape(template: str, expected: str) -> None:
    compiled = compile_args({"x": template})
    assert compiled.problems == ()
    assert compiled.resolve(OUTPUTS)["x"] == expected


def test_escape_only_is_not_a_binding() -> None:
    compiled = compile_args({"x": "$${count}"})
    assert compiled.refs == ()
    assert compiled.resolve({}) == {"x": "${count}"}


# -- nesting and untouched values --------------------------------------------------------------


def test_nested_args_in_lists_and_objects() -> None:
    args = {
        "query": {"ids": ["${rows.0.name}", "${count}", 7], "meta": {"owner": "${meta.owner.email}", "n": None}},
        "pairs": [["${flag}", "x"], {"deep": ["n=${count}"]}],
        "limit": 10,
    }
    assert resolve(args) == {
        "query": {"ids": ["ada", 3, 7], "meta": {"owner": "a@example.org", "n": None}},
        "pairs": [[True, "x"], {"deep": ["n=3"]}],
        "limit": 10,
    }


def test_object_keys_are_not_bindings() -> None:
    assert resolve({"m": {"${count}": "${count}"}}) == {"m": {"${count}": 3}}


def test_args_without_bindings_come_back_unchanged() -> None:
    args = {"a": 1, "b": [1, "two", {"c": None}], "d": "no binding here", "e": "$ { count }"}
    compiled = compile_args(args)
    assert compiled.refs == ()
    assert compiled.problems == ()
    assert compiled.resolve({}) == args


def test_resolve_does_not_change_the_compiled_args() -> None:
    compiled = compile_args({"x": ["${count}"]})
    first = compiled.resolve({"count": 1})
    second = compiled.resolve({"count": 2})
    assert first == {"x": [1]}
    assert second == {"x": [2]}
    assert compiled.args == {"x": ["${count}"]}


# -- malformed and unresolved bindings ---------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    ["${}", "${1abc}", "${a b}", "${a..b}", "${a.}", "${.a}", "x ${-a} y", "${a. b}"],
)
def test_malformed_binding_is_reported(template: str) -> None:
    compiled = compile_args({"arg": {"inner": [template]}}, where="step 's1' args")
    assert [p.code for p in compiled.problems] == ["binding_syntax"]
    problem = compiled.problems[0]
    assert problem.where == "step 's1' args.arg.inner.0"
    assert "malformed binding" in problem.message


def test_every_malformed_binding_is_reported() -> None:
    compiled = compile_args({"a": "${}", "b": ["ok ${rows}", "${1x} and ${2y}"]})
    assert [p.where for p in compiled.problems] == ["args.a", "args.b.1", "args.b.1"]
    assert [ref for _, ref in compiled.refs] == [Ref(step_id="rows", path=())]


def test_missing_step_raises_binding_error() -> None:
    compiled = compile_args({"x": "${ghost}"})
    with pytest.raises(BindingError) as info:
        compiled.resolve(OUTPUTS)
    [problem] = info.value.problems
    assert problem.code == "binding_unresolved"
    assert problem.where == "${ghost}"
    assert "ghost" in problem.message


@pytest.mark.parametrize(
    ("binding", "fragment"),
    [
        ("${meta.missing}", "no field 'missing'"),
        ("${rows.3}", "index 3 is out of range"),
        ("${rows.-4}", "index -4 is out of range"),
        ("${rows.first}", "is a list"),
        ("${count.value}", "int"),
        ("${nothing.x}", "NoneType"),
        ("${title.0}", "str"),
    ],
)
def test_bad_path_raises_binding_error(binding: str, fragment: str) -> None:
    compiled = compile_args({"x": binding})
    with pytest.raises(BindingError) as info:
        compiled.resolve(OUTPUTS)
    [problem] = info.value.problems
    assert problem.code == "binding_unresolved"
    assert fragment in problem.message
    assert fragment in str(info.value)


def test_binding_error_lists_every_problem() -> None:
    compiled = compile_args(
        {
            "a": "${ghost}",
            "b": "text ${rows.9} and ${meta.nope}",
            "c": [{"d": "${count.x}"}],
            "e": "${count}",
        }
    )
    with pytest.raises(BindingError) as info:
        compiled.resolve(OUTPUTS)
    problems = info.value.problems
    assert [p.where for p in problems] == ["${ghost}", "${rows.9}", "${meta.nope}", "${count.x}"]
    assert {p.code for p in problems} == {"binding_unresolved"}
    message = str(info.value)
    for p in problems:
        assert p.where in message


def test_an_unclosed_binding_is_a_problem_not_text() -> None:
    compiled = compile_args({"text": "price ${a"})
    assert [p.code for p in compiled.problems] == ["binding_syntax"]
    assert "unclosed" in compiled.problems[0].message


def test_resolving_args_with_a_malformed_binding_refuses() -> None:
    compiled = compile_args({"text": "x ${1a} y"})
    with pytest.raises(BindingError) as caught:
        compiled.resolve({})
    assert [p.code for p in caught.value.problems] == ["binding_syntax"]


# -- bounded nesting ---------------------------------------------------------------------------


def deep_list(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_args_nested_too_deep_compile_to_one_problem() -> None:
    compiled = compile_args({"a": "${rows}", "deep": {"x": deep_list(10_000, "${rows}")}}, where="step 's' args")
    [problem] = compiled.problems
    assert problem.code == "too_deep"
    assert problem.where == "step 's' args.deep.x" + ".0" * 98
    assert "nested deeper than 100 levels" in problem.message
    assert compiled.refs == ()
    with pytest.raises(BindingError) as info:
        compiled.resolve(OUTPUTS)
    assert [p.code for p in info.value.problems] == ["too_deep"]
    # one level less is fine
    at_the_limit = compile_args({"x": deep_list(99, "n=${count}")})
    assert at_the_limit.problems == ()
    assert at_the_limit.resolve(OUTPUTS) == {"x": deep_list(99, "n=3")}


def test_args_without_bindings_are_depth_checked_too() -> None:
    compiled = compile_args({"deep": deep_list(5_000)})
    assert [p.code for p in compiled.problems] == ["too_deep"]
    with pytest.raises(BindingError):
        compiled.resolve({})


def test_render_text_refuses_what_cannot_be_written() -> None:
    looped: list[Any] = []
    looped.append(looped)
    for value, code in ((deep_list(100_000), "too_deep"), (looped, "not_json"), (10**5000, "not_json")):
        with pytest.raises(BindingError) as info:
            render_text(value)
        assert [p.code for p in info.value.problems] == [code]


def test_a_text_binding_to_an_unwritable_output_says_which_binding() -> None:
    compiled = compile_args({"x": "a ${deep} b ${count}"})
    deep = deep_list(100_000)
    with pytest.raises(BindingError) as info:
        compiled.resolve({"deep": deep, "count": 3})
    [problem] = info.value.problems
    assert (problem.code, problem.where) == ("too_deep", "${deep}")
    # a whole-value binding is not rendered: the output is handed on as it is
    assert compile_args({"x": "${deep}"}).resolve({"deep": deep})["x"] is deep
