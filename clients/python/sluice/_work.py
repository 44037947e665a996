"""The working folder: the only state of a call (docs/python.md)."""

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, Iterable, Optional

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt
except ImportError:
    msvcrt = None  # type: ignore[assignment]

_ID_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def fingerprint(*parts: Any) -> str:
    """Hex SHA-256 of parts as canonical JSON (sorted keys)."""
    h = hashlib.sha256(b"sluice-py-v1\n")
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def location(kind: str, fp: str, checkpoint_dir: Optional[str]) -> "tuple[str, bool]":
    """The working folder of a job of this kind and fingerprint (not
    created: Lock.acquire does that), and whether it is temporary (removed
    once the call finished)."""
    name = "%s_%s" % (kind, fp[:12])
    if checkpoint_dir:
        return os.path.abspath(os.path.join(os.fspath(checkpoint_dir), name)), False
    return os.path.abspath(os.path.join(tempfile.gettempdir(), _TEMP_NAME, name)), True


_TEMP_NAME = "sluice-py-%s" % (os.getuid() if hasattr(os, "getuid") else "user")
LOCK_NAME = "py.lock"
_WAITING = ".waiting."


class Lock:
    """An exclusive lock on a working folder, held for a whole call (input
    written, sluice run, results read, folder removed), so two identical
    calls at once take turns: the second finds the first's results and
    sluice resumes them (nothing is sent again) instead of failing on
    sluice's own results-file lock. A temporary folder is removed only by
    the holder, and not while another call waits for it.

    fcntl.flock on POSIX (per open file, so threads of one process exclude
    each other too; released by the kernel if the process dies); msvcrt's
    byte lock on Windows; elsewhere a lock within this process only."""

    def __init__(self, path: str, temp: bool):
        self.path = path
        self.temp = temp
        self.fd: Optional[int] = None

    def acquire(self, cancel: Optional[threading.Event] = None) -> bool:
        """Creates the folder and takes the lock, waiting as long as it
        takes; with cancel, polls and gives up (False) once it is set."""
        lock_path = os.path.join(self.path, LOCK_NAME)
        while True:
            if cancel is not None and cancel.is_set():
                return False
            if self.temp:
                temp_parent(os.path.dirname(self.path))
            else:
                os.makedirs(self.path, mode=0o700, exist_ok=True)
            marker = None
            fd = None
            try:
                if self.temp:
                    try:
                        os.mkdir(self.path, 0o700)
                    except FileExistsError:
                        pass
                    # tells a holder about to remove the folder that a call waits for it
                    marker = os.path.join(self.path, "%s%d.%s" % (_WAITING, os.getpid(), uuid.uuid4().hex))
                    os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                if not self._lock(fd, cancel):
                    return False
                if not _same_file(fd, lock_path):
                    continue  # the folder was removed (and perhaps made again) while we waited: again
                self.fd, fd = fd, None
                return True
            except FileNotFoundError:
                continue  # removed under us: again
            finally:
                if fd is not None:
                    os.close(fd)
                if marker is not None:
                    _unlink(marker)

    def _lock(self, fd: int, cancel: Optional[threading.Event]) -> bool:
        if fcntl is not None and cancel is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        while not _try_lock(fd, self.path):
            if cancel is None:
                time.sleep(0.05)
            elif cancel.wait(0.05):
                return False
        return True

    def release(self, finished: bool) -> None:
        """Removes a temporary folder of a call that finished (unless a call
        waits for it), then lets the lock go."""
        if self.fd is None:
            return
        try:
            if finished and self.temp and not _waiters(self.path):
                remove(self.path)
        finally:
            fd, self.fd = self.fd, None
            _unlock(fd, self.path)
            os.close(fd)

_local_locks: Dict[str, threading.Lock] = {}
_local_guard = threading.Lock()


def _try_lock(fd: int, path: str) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    if msvcrt is not None:  # pragma: no cover - Windows
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    with _local_guard:  # pragma: no cover - neither
        lk = _local_locks.setdefault(path, threading.Lock())
    return lk.acquire(blocking=False)


def _unlock(fd: int, path: str) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif msvcrt is not None:  # pragma: no cover - Windows
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:
            pass
    else:  # pragma: no cover
        with _local_guard:
            lk = _local_locks.get(path)
        if lk is not None and lk.locked():
            lk.release()


def _same_file(fd: int, path: str) -> bool:
    """Whether fd is still the file at path (a lock taken on a file whose
    folder was removed meanwhile locks nothing anybody else will open)."""
    if fcntl is None:  # pragma: no cover - Windows cannot remove an open file
        return True
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _waiters(path: str) -> bool:
    """Whether a live process waits for the lock of the folder at path."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return False
    for name in names:
        if not name.startswith(_WAITING):
            continue
        try:
            pid = int(name[len(_WAITING):].split(".", 1)[0])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def temp_parent(path: str) -> str:
    """path, $TMPDIR/sluice-py-<uid>, created 0700, and refused
    (PermissionError) unless it is a real folder of this user that nobody
    else can write: its name is predictable, and whoever controls it
    controls the requests sluice sends and the results a call returns."""
    if not hasattr(os, "getuid"):  # no uids (Windows): the user's own temp folder
        os.makedirs(path, exist_ok=True)
        return path
    uid = os.getuid()
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass

    def refuse(why: str) -> PermissionError:
        return PermissionError("sluice: refusing the temporary folder %s: %s; remove it, or pass checkpoint_dir"
                               % (path, why))

    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise refuse("it is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise refuse("it is not a folder")
    if st.st_uid != uid:
        raise refuse("it belongs to uid %d, not to this user (uid %d)" % (st.st_uid, uid))
    if st.st_mode & 0o022:
        raise refuse("group or others may write to it (mode %o)" % stat.S_IMODE(st.st_mode))
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)  # e.g. 0755 as earlier versions made it: ours, and nobody else could write
    return path


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def write_atomic(path: str, data: bytes) -> None:
    """Replaces the file at path whole (temp file, fsync, rename), and
    leaves it untouched when it already holds data (its time stays)."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except FileNotFoundError:
        pass
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def jsonl(rows: Iterable[Any]) -> bytes:
    return b"".join(line(r) for r in rows)


class BadValue(ValueError):
    """A value JSON cannot carry to sluice (the message says why; the
    caller names the item). type_error: an object of a type JSON has no
    form for (the caller raises TypeError, as json does)."""

    def __init__(self, message: str, type_error: bool = False):
        super().__init__(message)
        self.type_error = type_error


def line(row: Any) -> bytes:
    """row as one JSON line (UTF-8). A NaN or infinity (JSON has none: the
    line would be refused), a lone surrogate (not UTF-8) or an object JSON
    cannot hold raises BadValue saying which."""
    try:
        text = json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except TypeError as e:
        raise BadValue("a value JSON cannot hold (%s)" % e, type_error=True) from None
    except ValueError:
        raise BadValue("a NaN or infinite number, which JSON cannot hold") from None
    except RecursionError:
        raise BadValue("a value that contains itself") from None
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError as e:
        raise BadValue("text that is not valid Unicode (a lone surrogate, %r, at position %d)"
                       % (e.object[e.start:e.end], e.start)) from None


def read_jsonl(path: str):
    """The complete JSON lines of the file at path (a torn or unreadable
    line is skipped: sluice repairs it on resume)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            try:
                yield json.loads(raw)
            except ValueError:
                continue


def read_json(path: str) -> Optional[Any]:
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def safe_id(text: str, limit: int) -> str:
    """text cut to the custom-id alphabet ([A-Za-z0-9_-]) and limit
    characters."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)[:limit]


def id_ok(text: str) -> bool:
    return bool(_ID_OK.match(text))
