"""Which of AgentDojo's functions change the environment: the tools planexec marks ``effect:
write`` (``side_effect=True``). Every other function of a suite only reads.

The table is written down, function by function, from AgentDojo's code; :func:`changed_by_ground_truth`
derives what it can of it (a function seen to change the environment when a ground truth calls
it), and the tests hold the two together. Two reads that change something are writes here:
``get_webpage`` (slack) logs the URL it visits — a request to an address the agent chose, which
is how data leaves — and ``get_unread_emails`` (workspace) marks the emails it returns as read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planexec.agentdojo._suites import DojoSuite

__all__ = ["WRITES", "Changes", "changed_by_ground_truth"]

WRITES: Mapping[str, frozenset[str]] = {
    "banking": frozenset(
        {"send_money", "schedule_transaction", "update_scheduled_transaction", "update_password", "update_user_info"}
    ),
    "slack": frozenset(
        {
            "add_user_to_channel",
            "send_direct_message",
            "send_channel_message",
            "invite_user_to_slack",
            "remove_user_from_slack",
            "get_webpage",
            "post_webpage",
        }
    ),
    "travel": frozenset(
        {
            "create_calendar_event",
            "cancel_calendar_event",
            "reserve_hotel",
            "reserve_car_rental",
            "reserve_restaurant",
            "send_email",
        }
    ),
    "workspace": frozenset(
        {
            "send_email",
            "delete_email",
            "get_unread_emails",
            "create_calendar_event",
            "cancel_calendar_event",
            "reschedule_calendar_event",
            "add_calendar_event_participants",
            "append_to_file",
            "create_file",
            "delete_file",
            "share_file",
        }
    ),
}
"""Per suite, the functions that change the environment."""


@dataclass(frozen=True, kw_only=True)
class Changes:
    """What running every ground truth of a suite showed: the functions called, and those of
    them that changed the environment at least once."""

    called: frozenset[str]
    changed: frozenset[str]


def changed_by_ground_truth(suite: DojoSuite) -> Changes:
    """Run each user and injection task's ground truth on a fresh environment of ``suite``,
    through AgentDojo's own function runtime, and compare the environment before and after each
    call."""
    from agentdojo.functions_runtime import FunctionsRuntime

    runtime = FunctionsRuntime(suite.functions)
    called: set[str] = set()
    changed: set[str] = set()
    loaded = suite.load_environment({})
    for task in [*suite.user_tasks.values(), *suite.injection_tasks.values()]:
        environment = loaded.model_copy(deep=True)
        init = getattr(task, "init_environment", None)  # user tasks have one, injection tasks not
        if init is not None:
            environment = init(environment)
        for call in task.ground_truth(environment.model_copy(deep=True)):
            before = environment.model_dump()
            runtime.run_function(environment, call.function, call.args)
            called.add(call.function)
            if environment.model_dump() != before:
                changed.add(call.function)
    return Changes(called=frozenset(called), changed=frozenset(changed))
