"""BFCL's calls as it writes them (``mv(source='a.txt', destination='temp')``), read without
``eval``: the function's name and its arguments as keyword arguments."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["Call", "parse_call"]

Call = tuple[str, dict[str, Any]]


def parse_call(text: str, signature_of: Callable[[str], inspect.Signature | None]) -> Call:
    """``text`` as (name, keyword arguments); positional arguments are named from the method's
    signature (``signature_of(name)``). Raises ``ValueError`` for anything but a call of a name
    with literal arguments."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call of a function by its name: {text!r}")
    name = node.func.id
    kwargs: dict[str, Any] = {}
    if node.args:
        signature = signature_of(name)
        if signature is None:
            raise ValueError(f"{name} takes positional arguments, and its signature is unknown")
        params = [p for p in signature.parameters.values() if p.name != "self"]
        if len(node.args) > len(params):
            raise ValueError(f"{name} takes at most {len(params)} arguments: {text!r}")
        for param, arg in zip(params, node.args, strict=False):
            kwargs[param.name] = ast.literal_eval(arg)
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"**kwargs in a call: {text!r}")
        kwargs[keyword.arg] = ast.literal_eval(keyword.value)
    return name, kwargs
