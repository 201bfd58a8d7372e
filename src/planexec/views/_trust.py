"""Trust labels as a human is shown them: each argument's sources, and the rules a call breaks."""

from __future__ import annotations

from planexec.store import Redactor
from planexec.trust import Provenance, Violation
from planexec.views._models import ProvenanceView, SourceView, ViolationView

__all__ = ["provenance_view", "violation_view"]


def _clean(text: str, redactor: Redactor | None) -> str:
    return redactor.redact_text(text) if redactor is not None else text


def provenance_view(label: Provenance, redactor: Redactor | None) -> ProvenanceView:
    """A value's label as a view (its words redacted as the store redacts)."""
    return ProvenanceView(
        trusted=label.trusted,
        text=_clean(str(label), redactor),
        sources=[
            SourceView(
                kind=s.kind,
                trusted=s.trusted,
                step=s.step,
                tool=s.tool,
                call=s.call,
                text=_clean(str(s), redactor),
            )
            for s in label.sources
        ],
        confirmed_by=label.confirmed_by,
    )


def violation_view(violation: Violation, redactor: Redactor | None) -> ViolationView:
    """A broken trust rule as a view."""
    return ViolationView(
        argument=violation.argument,
        rule=violation.rule,
        requires=violation.requires,
        reason=_clean(violation.reason, redactor),
        provenance=provenance_view(violation.provenance, redactor),
        text=_clean(str(violation), redactor),
    )
