"""One run per output folder: an exclusive lock held for as long as the job's driver runs.

The lock is an operating-system lock (``flock``) on ``<folder>/_lock``, so it goes with its process: a run that is
killed, even with -9, leaves no lock behind, and the next run takes it over (the file's old text, who held it, is
simply replaced). The file says who holds the lock and since when, for the message a second run gets. Only local
folders (and mounts) are locked; a lake on HDFS or an object store is not (its file systems have no such lock).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import urllib.parse

from jobs.core.errors import UserError

LOCK_FILE = "_lock"


class FolderInUse(UserError):
    """Another run holds the folder's lock."""


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file:")


def _local(path: str) -> str:
    return urllib.parse.urlparse(path).path if path.startswith("file:") else path


@contextlib.contextmanager
def held(folder: str, job: str):
    """Holds ``folder``'s lock inside the block; a second holder meets ``FolderInUse`` naming the first."""
    if not is_local(folder):
        yield
        return
    folder = _local(folder)
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUse(f"{folder} is in use by another run ({holder(fd)}): wait for it to finish, or "
                              f"choose another output folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"job": job, "pid": os.getpid(), "host": socket.gethostname(),
                                 "since": dt.datetime.now().astimezone().isoformat(timespec="seconds")}).encode())
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


def check_free(folder: str) -> None:
    """Raises ``FolderInUse`` if another run holds ``folder``'s lock now (a launcher's early look: the job's
    driver takes the lock itself)."""
    if not is_local(folder) or not os.path.exists(os.path.join(_local(folder), LOCK_FILE)):
        return
    with held(folder, "check"):
        pass


def holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "holder unknown"
    return f"{info.get('job', '?')} job, process {info.get('pid', '?')} on {info.get('host', '?')}, " \
           f"since {info.get('since', '?')}"
