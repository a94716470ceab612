"""A forked child that computes one value and hands it back pickled: the second core, within one command.

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
    """Fork a child that sends ``work()`` back; its pid and the file to :func:`receive` it from, or None when
    the system would not make the file or the process (too many processes, no memory): do the work here.

    The child writes its value into an unnamed file in memory, not a pipe: a pipe holds 64 kB, so a child done
    early would wait for the parent to drain megabytes when it asks (22 ms of the parent's time on a 10 MB
    trace's columns, after the child had been idle for a tenth of a second); from the file the parent reads them
    in one copy.
    """
    try:
        fd = _memory_file()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(fd)
        return None
    if pid == 0:  # the child: never returns
        code = 1
        try:
            data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            code = 0
        except BaseException:  # noqa: BLE001 - the parent does the work itself and says what is wrong
            pass
        finally:
            os._exit(code)
    return pid, fd


def _memory_file() -> int:
    """A file descriptor of a new, unnamed file, in memory where the system has such files."""
    if hasattr(os, "memfd_create"):
        try:
            return os.memfd_create("advisor-forked", getattr(os, "MFD_CLOEXEC", 0))
        except OSError:
            pass
    import tempfile

    with tempfile.TemporaryFile() as f:  # unlinked at once; the descriptor outlives the object through dup
        return os.dup(f.fileno())


def receive(pid: int, fd: int) -> tuple[bool, Any]:
    """``(True, value)`` the child sent, or ``(False, None)`` when it sent nothing whole; waits for the child to
    end, and closes ``fd``."""
    try:
        _, status = os.waitpid(pid, 0)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return False, None
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
    except OSError:
        return False, None
    finally:
        os.close(fd)
    if len(data) != size or not data:
        return False, None
    try:
        return True, pickle.loads(data)
    except Exception:  # noqa: BLE001 - a partial write
        return False, None
