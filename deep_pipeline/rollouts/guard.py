"""The guard between a driver and one agent: the agent never outlives the driver (SPEC §9).

`run_process` starts `python -I -S guard.py STATUS_FD DRIVER_PID MODE -- argv...` as the
leader of a new session, with the agent's environment and cwd. The guard asks Linux for a
signal when its parent dies (prctl PR_SET_PDEATHSIG), starts the agent in its own
(the guard's) process group, reports "ok <pid>" or "error <reason>" on STATUS_FD, and waits. When the
driver dies, even by SIGKILL, the guard SIGKILLs every process of the rollout (its
group, plus whatever carries the rollout's marker variable) and exits.

Containment (MODE `contain`, SPEC §9): a descendant that calls setsid and clears
its environment leaves both the group and the marker behind. So the guard puts the rollout
in a PID namespace of its own: a forked copy of the guard is its PID 1 (an "init" that
mounts the namespace's own /proc, starts the agent, reaps orphans and tells the guard the
agent's status), and when that init ends, for any reason, the kernel SIGKILLs everything
left in the namespace. The init
dies with the guard (its own PDEATHSIG) and with the group, so every path that ends the
guard's group (a limit, the driver's death, the next run's records) empties the namespace.
Where no namespace can be made (no privilege, no user namespaces) the guard falls back to
the group and marker, and says so after "ok <pid>" (" uncontained: <why>") for the driver
to record; likewise " proc: <why>" when the agent must see the host's /proc.

Why a separate process rather than `preexec_fn`: rollouts start on a thread pool, and
preexec_fn is unsafe in a threaded parent. Run as a script (not `-m`), the guard imports
only the standard library, so it costs one bare interpreter start. This module is also
imported by the driver for the /proc helpers below, so it must stay stdlib-only.

PDEATHSIG fires when the *thread* that forked the guard exits; the rollout thread waits
for the guard in run_process, so it outlives it. A driver that dies before the signal
is armed is caught by re-checking getppid() right after arming it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# No pathlib or subprocess here: the guard starts once per rollout, and each import
# is paid in that start (the whole guard costs about one bare interpreter start).

# Every process of a rollout inherits this variable (unless it scrubs its own
# environment), which finds the ones that left the process group with setsid.
ROLLOUT_MARKER = "DEEP_PIPELINE_ROLLOUT"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; the command name before it may hold spaces."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Field 22 (starttime, clock ticks since boot): with the pid, names one process for good."""
    fields = stat_fields(pid)
    if not fields or len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[19])


def has_marker(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return f"{ROLLOUT_MARKER}={marker}\0".encode() in handle.read()
    except OSError:
        return False


def rollout_processes(pgid: int, marker: str | None = None) -> list[int]:
    """Live (non-zombie) processes in the group, or carrying `DEEP_PIPELINE_ROLLOUT=<marker>`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        fields = stat_fields(name)
        if not fields or len(fields) < 3 or fields[0] == "Z":
            continue
        if int(fields[2]) == pgid or (marker and has_marker(int(name), marker)):
            found.append(int(name))
    return found


def kill_all(pids_now, rounds: int = 50) -> int:
    """SIGKILL what `pids_now()` lists until it lists nothing (a fork may be in flight)."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = pids_now()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.02)
    return len(killed)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have this process get `sig` when its parent ends (Linux); elsewhere nothing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the runner's records of running agents are the only net


def main(argv: list[str]) -> int:
    status_fd, driver_pid, mode, agent_argv = int(argv[0]), int(argv[1]), argv[2], argv[4:]
    marker = os.environ.get(ROLLOUT_MARKER)

    def on_term(signum, frame) -> None:
        if os.getppid() == driver_pid:
            # run_process stopping the rollout: the agent got the same SIGTERM and gets
            # its grace; the guard stays to pass on its exit status.
            return
        kill_all(lambda: rollout_processes(os.getpgid(0), marker))
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    die_with_parent()
    with os.fdopen(status_fd, "w") as status:
        if os.getppid() != driver_pid:
            return 128 + signal.SIGTERM  # the driver died before the signal was armed: start nothing
        os.set_inheritable(status_fd, False)  # the agent must not hold the driver's pipe open
        try:
            uncontained = _new_pid_namespace() if mode == "contain" else "containment not asked for"
            if uncontained is None:
                agent, wait, note = _start_contained(agent_argv, status_fd)
            else:
                agent, wait, note = _spawn(agent_argv), _wait, f" uncontained: {uncontained}"
        except OSError as exc:
            status.write(f"error {exc.strerror or exc}\n")
            return 127
        status.write(f"ok {agent}{note}\n")
    code = wait(agent)
    if code < 0:  # die of the agent's signal, so the driver sees the agent's own status
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default is to be ignored
    return code


def _spawn(agent_argv: list[str]) -> int:
    # Same group as the guard: one killpg reaches both; stdio, cwd and env are inherited.
    # glibc's posix_spawnp reports a failed exec as an error here. SIGPIPE and
    # SIGXFSZ: the defaults Python's own startup replaced (as subprocess restores).
    return os.posix_spawnp(agent_argv[0], agent_argv, os.environ,
                           setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM))


# ---------------------------------------------------------------- containment

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER = 0x00020000, 0x20000000, 0x10000000  # linux/sched.h
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000  # linux/mount.h


def _new_pid_namespace() -> str | None:
    """Make the guard's next child PID 1 of a new namespace: None when done, else why not."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWPID) == 0:
            return None
        plain = os.strerror(ctypes.get_errno())
        # Without CAP_SYS_ADMIN, a user namespace of our own grants it (the guard is single-threaded,
        # as unshare(CLONE_NEWUSER) requires); ids map to themselves, so the agent runs as before.
        uid, gid = os.geteuid(), os.getegid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
            return f"no PID namespace ({plain}; in a user namespace: {os.strerror(ctypes.get_errno())})"
    except (OSError, AttributeError) as exc:
        return f"no PID namespace ({exc})"
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(text)  # an OSError here fails the start: unmapped, the agent would run as nobody
    return None


def _start_contained(agent_argv: list[str], status_fd: int):
    """Fork the namespace's init: its pid, how to wait for the agent's status, a note for the driver."""
    alive_r, alive_w = os.pipe()  # held open by the guard: EOF tells the init the guard is gone
    report_r, report_w = os.pipe()  # the init's "ok"/"error <why>", then the agent's exit code
    init = os.fork()
    if init == 0:
        os.close(status_fd)  # the driver reads it to EOF: only the guard may hold it
        os.close(alive_w)
        os.close(report_r)
        _init(agent_argv, alive_r, report_w)
    os.close(alive_r)
    os.close(report_w)
    report = os.fdopen(report_r, "r")
    started = report.readline().strip()  # "ok", or "ok proc: <why>" when the agent sees the host's /proc
    if not started.startswith("ok"):
        os.waitpid(init, 0)
        raise OSError(started.removeprefix("error ") or "the rollout's init ended without starting it")

    def wait(_pid: int) -> int:
        answer = report.readline().strip()  # empty: the init was killed, and the agent with it
        _wait(init)
        return int(answer) if answer else -signal.SIGKILL

    return init, wait, started[2:]


def _init(agent_argv: list[str], alive_r: int, report_w: int) -> None:
    """PID 1 of the rollout's namespace: start the agent, reap, report; never returns."""
    code = 1
    try:
        die_with_parent(signal.SIGKILL)  # the guard's death empties the namespace
        os.set_blocking(alive_r, False)
        try:
            if os.read(alive_r, 1) == b"":
                os._exit(1)  # the guard died before the signal was armed
        except BlockingIOError:
            pass
        # SIGTERM is the agent's to answer (it gets it with the group); the init stays for the
        # grace. The namespace's init only ever receives signals it handles, and SIGKILL.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        no_proc = _own_proc()
        try:
            agent = _spawn(agent_argv)
        except OSError as exc:
            os.write(report_w, f"error {exc.strerror or exc}\n".encode())
            os._exit(127)
        os.write(report_w, b"ok\n" if no_proc is None else f"ok proc: {no_proc}\n".encode())
        status = _reap_until(agent)
        os.write(report_w, f"{status}\n".encode())
        code = 0
    finally:
        os._exit(code)  # PID 1 leaves: the kernel SIGKILLs all else still in the namespace


def _own_proc() -> str | None:
    """Mount the namespace's own /proc (in a mount namespace of the init's): None, else why not.

    Under the host's /proc an agent would list host pids (ps, pgrep) that its kill() reads as
    its namespace's, so `pkill -f server` would miss. Only the init changes mounts: the guard
    stays in the host's mount namespace, whose /proc its cleanup reads.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if (libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0
                or libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0):
            return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        return str(exc)
    return None


def _reap_until(agent: int) -> int:
    """Reap every orphan the namespace hands to its init until the agent itself ends."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == agent and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
            return os.waitstatus_to_exitcode(status)


def _wait(pid: int) -> int:
    """The agent's exit code, or minus the signal that ended it (as subprocess reports it)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return 0
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
