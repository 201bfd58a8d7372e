"""MkDocs hooks for the planexec documentation site.

planexec's docstrings name other objects with reStructuredText roles (``:class:`Budget```,
``:func:`~planexec.plan.check_steps```); rendered as Markdown they would show the role itself
(":class:Budget"). This hook rewrites each role in the rendered API pages into a link to the object
where the site documents it, or into plain code where it does not (a private helper, say).

It runs on ``on_env``, once every page is rendered and before the autorefs plugin resolves
cross-references (autorefs runs late, at priority -50), so that the links it writes are resolved
like any other.
"""

from __future__ import annotations

import html
import re
from typing import Any

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):<code>(?P<target>[^<]+)</code>")
"""A role as Markdown renders it: the role's name, then its target in a code span."""

ANCHOR = re.compile(r'\bid="(?P<id>planexec(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"')
"""An object the API reference documents: mkdocstrings gives its heading its dotted path as id."""

PACKAGES = (
    "planexec",
    "planexec.errors",
    "planexec.testing",
    "planexec.log",
    "planexec.plan",
    "planexec.tools",
    "planexec.models",
    "planexec.executor",
    "planexec.planner",
    "planexec.runtime",
    "planexec.store",
    "planexec.faults",
    "planexec.eval",
    "planexec.react",
)
"""Where an unqualified name (``:class:`Budget```) is looked for, in this order."""


def _candidates(target: str) -> list[str]:
    if target.startswith("planexec"):
        # A fully qualified name; a private module's name may also be public on its package's face.
        parts = target.split(".")
        public = [p for p in parts[:-1] if not p.startswith("_")]
        qualified = [target, ".".join([*public, parts[-1]])]
        # A name moved to another package is still found where the site documents it now.
        return [*qualified, *(f"{package}.{parts[-1]}" for package in PACKAGES)]
    return [f"{package}.{target}" for package in PACKAGES]


def _rewrite(content: str, documented: set[str]) -> str:
    def link(match: re.Match[str]) -> str:
        raw = html.unescape(match.group("target")).strip()
        short = raw.startswith("~")
        target = raw.lstrip("~.")
        shown = html.escape(target.rsplit(".", 1)[-1] if short else target)
        for identifier in _candidates(target):
            if identifier in documented:
                return f'<autoref identifier="{html.escape(identifier)}" optional><code>{shown}</code></autoref>'
        return f"<code>{shown}</code>"

    return ROLE.sub(link, content)


def on_env(env: Any, config: Any, files: Any) -> Any:
    pages = [f.page for f in files if f.page is not None and f.page.content]
    documented = {m.group("id") for page in pages for m in ANCHOR.finditer(page.content)}
    for page in pages:
        if ":<code>" in page.content:
            page.content = _rewrite(page.content, documented)
    return env
