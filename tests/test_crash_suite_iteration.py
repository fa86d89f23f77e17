"""SPEC §9 under fire, the second half: SIGKILL a compile in its iteration (the candidate's
rollouts, the comparisons, the decision), its second matrix or its finalize, resume it, and it
ends as if never killed. The first half (inputs, first matrix): tests/test_crash_suite.py; the
points and their check: tests/crash_points.py.
"""

from __future__ import annotations

import pytest

from tests.crash_points import ITERATION_AND_AFTER, kill_and_resume

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("trigger", ITERATION_AND_AFTER, ids=[t.name for t in ITERATION_AND_AFTER])
def test_a_sigkilled_cli_compile_resumes_to_the_uninterrupted_end(tmp_path, crash_reference, trigger):
    kill_and_resume(tmp_path, crash_reference, trigger)
