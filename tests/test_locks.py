"""deep_pipeline.locks.file_lock: the one flock helper every lock is made of."""

from __future__ import annotations

import threading

from deep_pipeline.locks import file_lock


def test_a_held_lock_refuses_a_second_exclusive_and_a_shared_try_and_frees_on_exit(tmp_path):
    path = tmp_path / "sub" / "x.lock"
    with file_lock(path) as held:
        assert held and path.is_file()  # created, with its folder
        with file_lock(path, wait=False) as again:
            assert not again
        with file_lock(path, shared=True, wait=False) as look:
            assert not look
        with file_lock(path, wait=0.1) as timed:  # retries, then gives up
            assert not timed
    with file_lock(path, wait=False) as after:
        assert after


def test_two_shared_locks_coexist(tmp_path):
    path = tmp_path / "x.lock"
    with file_lock(path, shared=True) as one, file_lock(path, shared=True, wait=False) as two:
        assert one and two


def test_a_blocking_waiter_is_told_once_and_gets_the_lock_when_the_holder_lets_go(tmp_path):
    path = tmp_path / "x.lock"
    told, got = threading.Event(), threading.Event()

    def waiter() -> None:
        with file_lock(path, on_wait=told.set) as held:
            if held:
                got.set()

    with file_lock(path):
        thread = threading.Thread(target=waiter)
        thread.start()
        assert told.wait(10)
        assert not got.is_set()
    thread.join(10)
    assert got.is_set()
