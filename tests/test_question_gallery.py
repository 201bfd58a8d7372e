"""docs/how-to/approvals.md shows each kind of question as the command line shows it: what
scripts/question_gallery.py makes from real runs now (run it with --write after changing a view)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _gallery() -> ModuleType:
    spec = importlib.util.spec_from_file_location("question_gallery", ROOT / "scripts" / "question_gallery.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def utc() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.usefixtures("utc")
def test_the_approvals_page_shows_every_kind_of_question_as_the_cli_renders_it_now() -> None:
    gallery = _gallery()
    text, views = asyncio.run(gallery.gallery())
    page = gallery.PAGE.read_text(encoding="utf-8")
    assert gallery._page_with(text) == page, "run `python scripts/question_gallery.py --write`"
    kinds = {view["kind"] for view in views}
    assert kinds == {"plan", "step", "effect", "question", "escalation", "review", "answer", "budget"}


def test_every_picture_the_approvals_page_shows_is_there() -> None:
    page = (ROOT / "docs" / "how-to" / "approvals.md").read_text(encoding="utf-8")
    shown = re.findall(r"\]\(\.\./images/([^)]+\.png)\)", page)
    assert len(shown) >= 11  # the step and the patch, and a card of each of the nine runs
    for name in shown:
        assert (ROOT / "docs" / "images" / name).is_file(), name
