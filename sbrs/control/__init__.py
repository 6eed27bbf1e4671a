"""Run-time control: the scenario policy (environment → scenario) and the controller the socket talks to."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.control.controller import Controller, PolicyController, RequestError
    from sbrs.control.policy import (
        CHARACTERISTICS,
        ENVIRONMENT_FIELDS,
        Decision,
        Environment,
        MeasuredValues,
        Policy,
        check_environment_value,
        check_requirements,
        rank_scenarios,
    )

__all__ = [
    "CHARACTERISTICS",
    "ENVIRONMENT_FIELDS",
    "Controller",
    "Decision",
    "Environment",
    "MeasuredValues",
    "Policy",
    "PolicyController",
    "RequestError",
    "check_environment_value",
    "check_requirements",
    "rank_scenarios",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "Controller": "sbrs.control.controller",
    "PolicyController": "sbrs.control.controller",
    "RequestError": "sbrs.control.controller",
    "CHARACTERISTICS": "sbrs.control.policy",
    "ENVIRONMENT_FIELDS": "sbrs.control.policy",
    "Decision": "sbrs.control.policy",
    "Environment": "sbrs.control.policy",
    "MeasuredValues": "sbrs.control.policy",
    "Policy": "sbrs.control.policy",
    "check_environment_value": "sbrs.control.policy",
    "check_requirements": "sbrs.control.policy",
    "rank_scenarios": "sbrs.control.policy",
})
