"""The test run's xdist groups reach the scheduler: the README's test command runs on every core with
``--dist loadgroup``, and the tests that build inside the repository (``REPO_BUILDS``) rely on running one after
another on one worker. pytest-xdist carries a test's group in its node id (``test_x@group``); a pytest that no
longer reads that id back loses every group without a word (pytest-xdist issue 1386)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_BUILDS

pytestmark = REPO_BUILDS


def test_a_grouped_test_carries_its_group_to_the_scheduler(request: pytest.FixtureRequest) -> None:
    if not hasattr(request.config, "workerinput"):
        pytest.skip("runs in one process (-n0 or -p no:xdist): no scheduler to group tests")
    assert request.config.getoption("dist") == "no" and request.config.option.loadgroup  # a worker of loadgroup
    assert request.node.nodeid.endswith("@repo-builds"), request.node.nodeid
