"""Run one compiler command so that it cannot outlive tapescope nor take unbounded memory.

Run as a script, never imported by the package (``python -I -S compile_guard.py PARENT MEM CPU
-- CMD...``: no site, no tapescope import, ~20 ms): ``host_compiler.build_shared_object`` starts
it in a new process group (``start_new_session``); it starts CMD (g++, which starts cc1plus,
as and ld) in that group, with ``RLIMIT_AS`` = MEM bytes and ``RLIMIT_CPU`` = CPU seconds when
they are not 0, and waits for it. When the process that started it dies, by any signal, SIGKILL
included (its parent id is no longer PARENT), it ends the whole group: the compiler and its
children go with tapescope (issue 49: a client killed with -9 left the worker's compiler
running). A missed wall-clock deadline is the starter's to enforce (it kills the group).

Exit status: CMD's, or 128 + the signal that ended it; 127 when CMD cannot be started.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

POLL_S = 0.05  # how soon a dead parent is noticed


def main(argv: list[str]) -> int:
    parent, mem, cpu = int(argv[1]), int(argv[2]), int(argv[3])
    cmd = argv[5:]
    if os.getppid() != parent:  # the starter died before we ran
        return 128 + signal.SIGKILL
    pid = os.fork()
    if pid == 0:  # the compiler: limited, in our process group
        try:
            if mem > 0:
                resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            if cpu > 0:
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            os.execvp(cmd[0], cmd)
        except BaseException as e:  # noqa: BLE001 — a child that cannot exec says why, once
            os.write(2, f"cannot run {cmd[0]}: {e}\n".encode())
        os._exit(127)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        if os.getppid() != parent:  # tapescope is gone: so is everything it compiled
            os.killpg(0, signal.SIGKILL)
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
