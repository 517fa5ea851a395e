"""Stopping a plain (def) handler that runs past its timeout: an exception raised in its thread.

A thread cannot be killed. CPython can raise an exception in another thread
(PyThreadState_SetAsyncExc, as Dramatiq's time limit does): it takes effect at that thread's next
Python bytecode. So a handler busy in Python code stops at once, and one blocked in a C call (a
socket read without a timeout, time.sleep, a long C extension call) stops when that call returns,
before its next line of Python: its late side effects (the write after the sleep) never happen.
What it cannot stop is the C call itself.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from ..errors import CancelStopped as CancelStopped
from ..errors import TimeLimitExceeded as TimeLimitExceeded

# int PyThreadState_SetAsyncExc(unsigned long id, PyObject *exc): exc NULL withdraws a pending one
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)
_clear_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)


class Interruptible:
    """Runs a function on the calling thread so that another thread may stop it with an exception
    raised in it (stop). An exception stop() raised that would fire after the function returned is
    withdrawn (or, fired already, raised by run as the function's): it never lands in the code
    that runs after."""

    __slots__ = ("_lock", "_thread", "_raised", "_arg")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: int | None = None
        self._raised = False
        self._arg: Any = None

    def run(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """fn(arg), stoppable by stop() meanwhile (an Interruptible may run one call after another)."""
        lock = self._lock
        with lock:
            self._thread = threading.get_ident()
            self._arg = arg
            self._raised = False
        try:
            return fn(arg)
        finally:
            with lock:
                thread, self._thread, self._arg = self._thread, None, None
                if self._raised and thread is not None:
                    _clear_async_exc(thread, None)  # withdraws one not fired yet

    def stop(self, exc_type: type[BaseException] = TimeLimitExceeded, arg: Any = None) -> bool:
        """Raises exc_type in the thread inside run(), once; False when none runs (or already
        raised), or, given arg, when the call running is not fn(arg)."""
        with self._lock:
            if self._thread is None or self._raised or (arg is not None and self._arg is not arg):
                return False
            self._raised = True
            return _set_async_exc(self._thread, exc_type) == 1


class ThreadStopper:
    """Interruptible's contract for the calls of one thread made without a wrapper (a handler
    thread's plain handlers: two attribute stores a job, no lock): the thread sets ``arg`` to the
    job before the call and back to None after it, then calls settle() when ``raised`` is set. An
    exception stop() raised fires inside the call, or between its return and settle(), where the
    caller takes it as the call's error."""

    __slots__ = ("_lock", "thread", "arg", "raised")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.thread = threading.get_ident()  # made on the thread that makes the calls
        self.arg: Any = None
        self.raised = False

    def stop(self, exc_type: type[BaseException] = TimeLimitExceeded, arg: Any = None) -> bool:
        """Raises exc_type in the thread while it calls for arg (any call, arg None), once."""
        with self._lock:
            if self.raised:
                return False
            # raised before arg is read: a thread that stored None and then read raised False
            # made its store before this read, which then sees None (and raises nothing)
            self.raised = True
            current = self.arg
            if current is None or (arg is not None and current is not arg):
                self.raised = False
                return False
            return _set_async_exc(self.thread, exc_type) == 1

    def settle(self) -> None:
        """After a call, when ``raised`` was set: withdraws an exception not fired yet."""
        with self._lock:
            _clear_async_exc(self.thread, None)
            self.raised = False
