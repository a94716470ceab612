"""A forked child that computes one value and sends it back pickled: the second core, within one command.

Used where a command can hand part of its own work to a copy of itself (the trace decoded while the command
imports, :mod:`advisor.load.kineto_prefetch`; a trace's analyzers, :mod:`advisor.analyze.parallel`). The child
never runs the parent's atexit handlers or flushes its buffered output, and whatever goes wrong in it (an
exception, a signal, a value that cannot be pickled) sends nothing: the parent then does the work itself, where
an error is raised as without the child.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["can_fork", "receive", "start"]


def can_fork() -> bool:
    """Whether this process may hand work to a forked child: fork exists, ``$ADVISOR_WORKERS`` is not ``1``
    (everything in one process), and no other thread runs (forking a process with threads can copy a held lock)."""
    return (hasattr(os, "fork") and os.environ.get("ADVISOR_WORKERS", "").strip() != "1"
            and threading.active_count() == 1)


def start(work: Callable[[], Any]) -> tuple[int, int] | None:
    """Fork a child that sends ``work()`` back; its pid and the pipe to :func:`receive` it from, or None when
    the system would not make the pipe or the process (too many processes, no memory): do the work here."""
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        code = 1
        try:
            data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
            code = 0
        except BaseException:  # noqa: BLE001 - the parent does the work itself and says what is wrong
            pass
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def receive(pid: int, fd: int) -> tuple[bool, Any]:
    """``(True, value)`` the child sent, or ``(False, None)`` when it sent nothing whole; waits for the child to
    end, and closes ``fd``."""
    chunks = []
    try:
        with os.fdopen(fd, "rb") as pipe:
            while block := pipe.read(1 << 20):
                chunks.append(block)
    finally:
        _, status = os.waitpid(pid, 0)
    if not chunks or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return False, None
    try:
        return True, pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 - a partial write
        return False, None
