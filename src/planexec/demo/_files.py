"""The demo's world: a small customer-onboarding service, written as real files into a work directory.

What happened: a deploy renamed the signup form's ``company.vat_number`` field to ``company.vat_id``
and updated the self-serve handler, but not the enterprise KYC handler. Every enterprise signup now
fails in the ``enterprise_kyc`` branch with ``KeyError: 'vat_number'``. The current log file was
rotated in the middle of the failing run, so it ends before the error; the error is in the archived
segment the log points at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FAILING_RUN", "ScenarioFiles", "write_scenario_files"]

FAILING_RUN = "r-4821"
"""The id of the onboarding run that failed."""

WORKFLOW = "workflow/customer_onboarding.json"
CURRENT_LOG = "logs/onboarding.log"
ARCHIVED_LOG = "logs/archive/onboarding-20241120-0914.log"
CHANGELOG = "deploys/changelog.json"
ENTERPRISE_HANDLER = "handlers/enterprise_kyc.py"
SELF_SERVE_HANDLER = "handlers/self_serve.py"
FIXES = "fixes"

_WORKFLOW: dict[str, Any] = {
    "workflow": "customer-onboarding",
    "version": 14,
    "intake": {
        "form": "signup-v3",
        "fields": ["email", "plan", "company.name", "company.country", "company.vat_id", "company.size"],
    },
    "steps": [
        {"id": "receive_signup", "handler": "handlers/intake.py", "next": "route_by_plan"},
        {
            "id": "route_by_plan",
            "branch": {
                "on": "plan",
                "cases": {"starter": "self_serve", "team": "self_serve", "enterprise": "enterprise_kyc"},
            },
        },
    ],
    "branches": {
        "self_serve": {
            "handler": SELF_SERVE_HANDLER,
            "steps": ["create_account", "send_welcome_email"],
        },
        "enterprise_kyc": {
            "handler": ENTERPRISE_HANDLER,
            "steps": ["verify_company", "assign_success_manager", "provision_sso"],
            "on_error": "page_onboarding_oncall",
        },
    },
}

_ENTERPRISE_SOURCE = '''"""Enterprise branch: know-your-customer checks before an account is provisioned."""

from onboarding import registry, sso, staffing


def verify_company(signup):
    """Check the company against the business registry of its country."""
    company = signup["company"]
    country = company["country"]
    if country in registry.EU_COUNTRIES:
        vat = company["vat_number"]
        record = registry.lookup_vat(country, vat)
    else:
        record = registry.lookup_name(country, company["name"])
    if record is None:
        raise registry.NotFound(company["name"])
    return {"company_id": record.id, "verified": True}


def assign_success_manager(signup, company_id):
    return staffing.assign(company_id, size=signup["company"]["size"])


def provision_sso(signup, company_id):
    return sso.create_tenant(company_id, admin=signup["email"])
'''

_SELF_SERVE_SOURCE = '''"""Self-serve branch: accounts for starter and team plans."""

from onboarding import accounts, mail


def create_account(signup):
    company = signup.get("company", {})
    return accounts.create(signup["email"], vat_id=company.get("vat_id"))


def send_welcome_email(signup, account_id):
    return mail.send("welcome", to=signup["email"], account=account_id)
'''

_CHANGELOG: list[dict[str, Any]] = [
    {
        "id": "deploy-305",
        "version": "v2.13.2",
        "at": "2024-11-12T16:40:00Z",
        "author": "maya",
        "summary": "Bump the welcome email template to the winter campaign",
        "files": ["templates/welcome.html"],
    },
    {
        "id": "deploy-309",
        "version": "v2.13.3",
        "at": "2024-11-18T11:05:00Z",
        "author": "ivo",
        "summary": "Raise the SSO provisioning timeout from 10s to 20s",
        "files": ["config/sso.json"],
    },
    {
        "id": "deploy-311",
        "version": "v2.14.0",
        "at": "2024-11-19T17:22:00Z",
        "author": "sam",
        "summary": "Signup form v3: rename company.vat_number to company.vat_id",
        "files": ["forms/signup-v3.json", SELF_SERVE_HANDLER],
    },
]

INCIDENT_DAY = "2024-11-20"
"""The day the scenario happens on; 'recent' changes are counted back from it, not from today."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScenarioFiles:
    """Where the scenario's files are, relative to ``root``."""

    root: Path
    workflow: str = WORKFLOW
    current_log: str = CURRENT_LOG
    archived_log: str = ARCHIVED_LOG
    changelog: str = CHANGELOG
    enterprise_handler: str = ENTERPRISE_HANDLER
    fixes: str = FIXES

    def path(self, relative: str) -> Path:
        return self.root / relative


def _line_of(source: str, needle: str) -> int:
    for number, line in enumerate(source.splitlines(), 1):
        if needle in line:
            return number
    raise ValueError(f"{needle!r} is not in the source")


def _current_log(run: str) -> str:
    lines = [
        "2024-11-20T09:12:51Z INFO  r-4819 receive_signup ok plan=starter",
        "2024-11-20T09:12:52Z INFO  r-4819 route_by_plan -> self_serve",
        "2024-11-20T09:12:53Z INFO  r-4819 create_account ok account=acc_99120",
        "2024-11-20T09:12:54Z INFO  r-4819 send_welcome_email ok",
        "2024-11-20T09:12:54Z INFO  r-4819 run finished status=succeeded",
        f"2024-11-20T09:14:02Z INFO  {run} receive_signup ok plan=enterprise company='Nordlicht GmbH'",
        f"2024-11-20T09:14:03Z INFO  {run} route_by_plan -> enterprise_kyc",
        f"2024-11-20T09:14:05Z INFO  {run} verify_company started country=DE",
        f"2024-11-20T09:14:07Z NOTICE logrotate: segment closed (size limit 64MiB); continued in {ARCHIVED_LOG}",
    ]
    return "\n".join(lines) + "\n"


def _archived_log(run: str, line: int) -> str:
    lines = [
        f"2024-11-20T09:14:07Z NOTICE logrotate: segment opened, continues {CURRENT_LOG}",
        f"2024-11-20T09:14:08Z ERROR {run} verify_company failed branch=enterprise_kyc "
        f"exception=\"KeyError: 'vat_number'\" at={ENTERPRISE_HANDLER}:{line}",
        f"2024-11-20T09:14:08Z ERROR {run}   Traceback (most recent call last):",
        f'2024-11-20T09:14:08Z ERROR {run}     File "{ENTERPRISE_HANDLER}", line {line}, in verify_company',
        f'2024-11-20T09:14:08Z ERROR {run}       vat = company["vat_number"]',
        f"2024-11-20T09:14:08Z ERROR {run}   KeyError: 'vat_number'",
        f"2024-11-20T09:14:08Z WARN  {run} on_error -> page_onboarding_oncall",
        f"2024-11-20T09:14:09Z INFO  {run} run finished status=failed step=verify_company",
        "2024-11-20T09:14:31Z INFO  r-4822 receive_signup ok plan=team",
        "2024-11-20T09:14:31Z INFO  r-4822 route_by_plan -> self_serve",
        "2024-11-20T09:14:33Z INFO  r-4822 run finished status=succeeded",
    ]
    return "\n".join(lines) + "\n"


def write_scenario_files(root: Path) -> ScenarioFiles:
    """Write (or overwrite) every file of the scenario under ``root`` and say where they are."""
    files = ScenarioFiles(root=root)
    line = _line_of(_ENTERPRISE_SOURCE, '["vat_number"]')
    contents = {
        WORKFLOW: json.dumps(_WORKFLOW, indent=2) + "\n",
        CURRENT_LOG: _current_log(FAILING_RUN),
        ARCHIVED_LOG: _archived_log(FAILING_RUN, line),
        CHANGELOG: json.dumps(_CHANGELOG, indent=2) + "\n",
        ENTERPRISE_HANDLER: _ENTERPRISE_SOURCE,
        SELF_SERVE_HANDLER: _SELF_SERVE_SOURCE,
    }
    for relative, text in contents.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / FIXES).mkdir(parents=True, exist_ok=True)
    return files
