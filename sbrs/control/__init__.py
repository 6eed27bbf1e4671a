"""Run-time control: the scenario policy (environment → scenario) and the controller the socket talks to."""

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
