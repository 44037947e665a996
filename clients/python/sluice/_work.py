"""The working folder: the only state of a call (docs/python.md)."""

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from typing import Any, Iterable, Optional

_ID_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def fingerprint(*parts: Any) -> str:
    """Hex SHA-256 of parts as canonical JSON (sorted keys)."""
    h = hashlib.sha256(b"sluice-py-v1\n")
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def folder(kind: str, fp: str, checkpoint_dir: Optional[str]) -> "tuple[str, bool]":
    """The working folder of a job of this kind and fingerprint, created,
    and whether it is temporary (removed once the call finished)."""
    name = "%s_%s" % (kind, fp[:12])
    if checkpoint_dir:
        path, temp = os.path.join(os.fspath(checkpoint_dir), name), False
    else:
        path, temp = os.path.join(temp_parent(), name), True
    os.makedirs(path, mode=0o700, exist_ok=True)
    return os.path.abspath(path), temp


def temp_parent() -> str:
    """$TMPDIR/sluice-py-<uid>, created 0700, and refused (PermissionError)
    unless it is a real folder of this user that nobody else can write: its
    name is predictable, and whoever controls it controls the requests
    sluice sends and the results a call returns."""
    base = tempfile.gettempdir()
    if not hasattr(os, "getuid"):  # no uids (Windows): the user's own temp folder
        path = os.path.join(base, "sluice-py-user")
        os.makedirs(path, exist_ok=True)
        return path
    uid = os.getuid()
    path = os.path.join(base, "sluice-py-%d" % uid)
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
    return b"".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for r in rows)


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
