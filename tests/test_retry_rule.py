"""The loop's retry rule (core/retry.py): the attempt and the backoff are functions of the
step's failed runs alone."""

from deep_pipeline.core.retry import FailedRun, backoff, gave_up_line, plan_retry, waiting_line


def run(n: int, ended: float) -> FailedRun:
    return FailedRun(f"run-{n}", ended, f"launch failed {n}")


def test_a_step_with_no_failed_run_is_asked_for_now_under_its_plain_key():
    plan = plan_retry([], attempts=3, backoff_s=10, now=100)
    assert (plan.attempt, plan.wait_until, plan.give_up, plan.run_key("iteration:k")) == (1, None, False, "iteration:k")


def test_each_retry_waits_twice_as_long_after_the_last_failed_run_ended_and_has_a_key_of_its_own():
    assert [backoff(n, 10) for n in (1, 2, 3)] == [10, 20, 40]
    one = plan_retry([run(1, 100)], attempts=3, backoff_s=10, now=105)
    assert (one.attempt, one.wait_until, one.last.run_id, one.run_key("m:k")) == (2, 110, "run-1", "m:k:1")
    assert plan_retry([run(1, 100)], attempts=3, backoff_s=10, now=110).wait_until is None  # due: now
    # Order does not matter: the last to end is the one retried, the wait counts from its end.
    two = plan_retry([run(2, 200), run(1, 100)], attempts=3, backoff_s=10, now=210)
    assert (two.attempt, two.wait_until, two.last.run_id, two.run_key("m:k")) == (3, 220, "run-2", "m:k:2")


def test_past_the_limit_the_step_is_given_up_with_a_line_that_says_to_resume():
    plan = plan_retry([run(1, 100), run(2, 200), run(3, 300)], attempts=3, backoff_s=10, now=10_000)
    assert plan.give_up and plan.last.run_id == "run-3"
    line = gave_up_line("iteration:c/section/iteration/0", plan, "c")
    assert "failed in 3 runs" in line and "run-3" in line and "`deep-pipeline resume c`" in line
    assert plan_retry([run(1, 100)], attempts=1, backoff_s=0, now=100).give_up  # one attempt: no retry


def test_the_waiting_line_names_the_step_the_attempt_and_the_failed_run():
    plan = plan_retry([run(1, 100)], attempts=3, backoff_s=10, now=100)
    assert waiting_line("matrix:m", plan) == "waiting to retry matrix:m (attempt 2 of 3) after run run-1 failed: launch failed 1"
