"""Running the sluice binary: finding it, its environment, its signals, its
progress lines. Both the sync and the async path live here, so judge and
dispatch only say which arguments to run."""

import asyncio
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence

from ._version import __version__

# The variables sluice reads keys from (keys/load.go).
KEY_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_BATCH_KEY", "ANTHROPIC_API_KEY_LOW_PRIO", "ANTHROPIC_API_KEYS")

# Exit status of a sluice job that stopped early and resumes when re-run.
EXIT_INTERRUPTED = 2

INSTALL_HINT = (
    "set SLUICE_BIN to the sluice binary's path or put `sluice` on PATH; build it with "
    "`go install github.com/sluice-dev/sluice/cmd/sluice@latest`, or `go build -o ~/bin/sluice ./cmd/sluice` "
    "in a clone of the repository"
)


class SluiceError(RuntimeError):
    """sluice exited with a non-zero status. ``returncode`` is its status
    (negative: killed by that signal), ``stderr`` the last lines it wrote
    (sluice redacts keys from them; so does this package)."""

    def __init__(self, message: str, returncode: int = 1, stderr: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class SluiceInterrupted(SluiceError):
    """sluice stopped early (exit status 2: interrupted, or out of budget);
    calling again with the same arguments resumes the job."""


class SluiceNotFound(SluiceError, FileNotFoundError):
    """The sluice binary is not where SLUICE_BIN says, nor on PATH."""


class Progress(NamedTuple):
    """One progress line of sluice (written every 10 s while a job runs, and
    once at its end). ``line`` is the line as sluice wrote it."""

    done: int
    total: int
    per_minute: float
    in_flight: int
    rate_limited: int
    overloaded: int
    server_errors: int
    elapsed: str
    eta: str
    cost_usd: Optional[float]
    line: str


_PROGRESS = re.compile(
    r"^progress: (\d+)/(\d+) done, ([\d.]+) req/min, in flight (\d+), 429s (\d+), 529s (\d+), 5xx (\d+), "
    r"elapsed (\S+), eta (\S+), cost (?:\$([\d.]+)|unknown)"
)


def parse_progress(line: str) -> Optional[Progress]:
    """The Progress of one of sluice's progress lines, or None for any other
    line."""
    m = _PROGRESS.match(line)
    if not m:
        return None
    g = m.groups()
    return Progress(int(g[0]), int(g[1]), float(g[2]), int(g[3]), int(g[4]), int(g[5]), int(g[6]), g[7], g[8],
                    float(g[9]) if g[9] is not None else None, line.rstrip("\n"))


_LOGFIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_log_fields(line: str) -> Dict[str, str]:
    """The key=value fields of one of sluice's log lines (slog's text
    format; quoted values unquoted)."""
    out = {}
    for k, v in _LOGFIELD.findall(line):
        if v.startswith('"'):
            try:
                v = json.loads(v)
            except ValueError:
                v = v[1:-1]
        out[k] = v
    return out


_binary_checked: Dict[str, str] = {}
_warned: set = set()


def warn_once(key: str, message: str, category=UserWarning, stacklevel: int = 3) -> None:
    """Warn with message the first time key is seen in this process."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, category, stacklevel=stacklevel)


def find_binary() -> str:
    """The sluice binary's absolute path: $SLUICE_BIN (relative to the
    working directory), else `sluice` on PATH. Raises
    SluiceNotFound, saying how to install it. The first time a binary is
    used, its version is compared with this package's (a warning if they
    differ)."""
    env = os.environ.get("SLUICE_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise SluiceNotFound("sluice: SLUICE_BIN=%s is not an executable file; %s" % (env, INSTALL_HINT))
        # Absolute: a bare name would otherwise be looked up on PATH when
        # launched (another binary than the one checked here), and a
        # relative one would follow a later chdir.
        path = os.path.abspath(env)
    else:
        path = shutil.which("sluice")
        if path is None:
            raise SluiceNotFound("sluice: the sluice binary was not found; " + INSTALL_HINT)
        path = os.path.abspath(path)  # PATH may hold a relative folder
    if path not in _binary_checked:
        _binary_checked[path] = _check_version(path)
    return path


def _check_version(path: str) -> str:
    try:
        out = subprocess.run([path, "version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        got = out.stdout.strip().split()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        got = ""
    if got != __version__:
        warn_once("version:" + path, "sluice: the binary %s is version %s, this package %s; use the binary of the same "
                  "release" % (path, got or "unknown (no `sluice version`)", __version__), stacklevel=4)
    return got


# sluice refuses a key value shorter than this (keys/load.go); so does
# org_keys, before anything is started.
MIN_KEY_LEN = 8
_KEY_OK = re.compile(r"[!-+\--~]{%d,}" % MIN_KEY_LEN)  # printable ASCII, no space, no comma
_LABEL_OK = re.compile(r"[A-Za-z0-9_.-]{1,40}")


def _tail(text: str) -> str:
    """text shown by its last 4 characters at most (a value that may be a
    key is never echoed whole; keys are at least MIN_KEY_LEN long)."""
    return "…" + text[-4:]


def _check_label(label) -> None:
    """Refuses an org_keys label that is not one, without echoing it: a
    mapping given the wrong way round ({key: label}) holds keys as labels,
    and a label goes into logs and results."""
    text = label if isinstance(label, str) else repr(label)
    if text[:3].lower() == "sk-":
        raise ValueError("sluice: an org_keys label (ending %r) starts with 'sk-', so it looks like an API key: "
                         "org_keys maps label → key, e.g. {'main': 'sk-ant-…'}" % _tail(text))
    if not isinstance(label, str) or not _LABEL_OK.fullmatch(label):
        raise ValueError("sluice: an org_keys label (ending %r) is not a label: use 1 to 40 letters, digits, _, - "
                         "and .; org_keys maps label → key" % _tail(text))


def child_env(org_keys: Optional[Dict[str, str]] = None, base_url: Optional[str] = None) -> Dict[str, str]:
    """The child's environment: this process's, with org_keys (label → key)
    replacing every key variable when given, and base_url as
    ANTHROPIC_BASE_URL. Keys travel only here, never in argv."""
    env = dict(os.environ)
    if org_keys:
        for v in KEY_VARS:
            env.pop(v, None)
        items = []
        for n, (label, key) in enumerate(org_keys.items(), 1):
            _check_label(label)
            if not isinstance(key, str) or not _KEY_OK.fullmatch(key):
                # Neither is echoed whole: a mapping given the wrong way
                # round has a key as its label.
                raise ValueError("sluice: org_keys entry %d (label ending %r): the value is not an API key (at least "
                                 "%d printable ASCII characters, no spaces or commas); org_keys maps label → key"
                                 % (n, _tail(label), MIN_KEY_LEN))
            items.append("%s=%s" % (label, key))
        env["ANTHROPIC_API_KEYS"] = ",".join(items)
    if base_url:
        env["ANTHROPIC_BASE_URL"] = base_url
    return env


def key_flags(org_keys: Optional[Dict[str, str]]) -> List[str]:
    """The flags every sluice command of a call takes beside child_env's
    environment: org_keys replace every key, ./.env's too (sluice would
    otherwise fall back to a .env in the working directory)."""
    return ["--no-dotenv"] if org_keys else []


def secrets(env: Dict[str, str]) -> List[str]:
    """Every key value env holds (for redaction and the argv check). A
    value shorter than MIN_KEY_LEN is not a key sluice would take (and
    child_env refuses one in org_keys), so it is not redacted: redacting
    "abc" would mangle every line."""
    out = []
    for v in KEY_VARS:
        val = env.get(v, "")
        if v == "ANTHROPIC_API_KEYS":
            for item in val.split(","):
                item = item.strip()
                out.append(item.split("=", 1)[1] if "=" in item else item)
        else:
            out.append(val.strip())
    out = [s for s in out if len(s) >= MIN_KEY_LEN]
    # Longest first, so a key holding another is redacted whole.
    return sorted(set(out), key=len, reverse=True)


def redact(text: str, values: Iterable[str]) -> str:
    for s in values:
        text = text.replace(s, "[redacted]")
    return text


def check_args(args: Sequence[str], values: Iterable[str]) -> None:
    """Refuses argv that holds a key value (argv is visible to every user of
    the machine), without echoing it."""
    for a in args:
        for s in values:
            if s in a:
                raise ValueError("sluice: an argument holds an API key value; keys go in the environment, .env or "
                                 "--keys-file, never in argv")


class Child:
    """One sluice invocation: arguments, environment, and where its lines go.

    on_line(line) sees every stderr line; progress(Progress) every progress
    line; echo copies stderr to sys.stderr (the familiar lines)."""

    def __init__(self, args: List[str], env: Dict[str, str], *, echo: bool = True,
                 on_progress: Optional[Callable[[Progress], None]] = None,
                 on_line: Optional[Callable[[str], None]] = None, stdout_path: Optional[str] = None):
        self.bin = find_binary()
        self.args = list(args)
        self.env = env
        self.secrets = secrets(env)
        check_args(self.args, self.secrets)
        self.echo = echo
        self.on_progress = on_progress
        self.on_line = on_line
        self.stdout_path = stdout_path
        self.tail: collections.deque = collections.deque(maxlen=40)
        self.interrupted = False
        # The first exception a callback raised: the child is stopped
        # (SIGINT), its stderr read to the end, and this raised once it
        # exited.
        self.callback_error: Optional[BaseException] = None
        self._proc = None

    def _popen_kwargs(self) -> dict:
        # No preexec_fn: it is unsafe with threads (the child can deadlock
        # before sluice starts) and forces fork(). Parent death is sluice's
        # own business: it is started with --exit-with-parent and a pipe
        # on its stdin that this process holds and never writes to; when
        # this process dies, however it dies, the pipe's end closes and
        # sluice drains as for SIGTERM. Its own session keeps a terminal's
        # Ctrl-C for this package to pass on, once.
        return dict(env=self.env, start_new_session=True)

    def _argv(self) -> List[str]:
        return [self.bin, "--exit-with-parent"] + self.args

    def _line(self, line: str) -> None:
        line = redact(line, self.secrets)
        self.tail.append(line.rstrip("\n"))
        if self.echo:
            sys.stderr.write(line if line.endswith("\n") else line + "\n")
            sys.stderr.flush()
        if self.callback_error is not None:
            return  # no more callbacks once one raised
        try:
            if self.on_line is not None:
                self.on_line(line)
            if self.on_progress is not None:
                p = parse_progress(line)
                if p is not None:
                    self.on_progress(p)
        except Exception as e:  # the caller's callback: stop the job, keep draining, raise it at the end
            self.callback_error = e
            proc = self._proc
            if proc is not None and proc.returncode is None:
                try:
                    proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass

    def _raise_callback_error(self) -> None:
        if self.callback_error is not None:
            err, self.callback_error = self.callback_error, None
            raise err

    def _result(self, rc: int) -> None:
        if rc == 0:
            return
        tail = "\n".join(self.tail)
        what = "sluice %s" % (self.args[0] if self.args else "")
        if rc == EXIT_INTERRUPTED:
            raise SluiceInterrupted("%s stopped early (exit status 2); call again with the same arguments to "
                                    "resume\n%s" % (what, tail), rc, tail)
        status = "killed by signal %d" % -rc if rc < 0 else "exit status %d" % rc
        raise SluiceError("%s failed (%s)\n%s" % (what, status, tail), rc, tail)

    def _stdout(self):
        if self.stdout_path:
            return open(self.stdout_path, "wb")
        return open(os.devnull, "wb")

    # The sync path.

    def run(self) -> None:
        """Runs the child to its end. On KeyboardInterrupt the child gets one
        SIGINT (a second KeyboardInterrupt: another, which aborts requests
        in flight); the call waits for it to exit, then re-raises."""
        with self._stdout() as out:
            proc = subprocess.Popen(self._argv(), stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE,
                                    **self._popen_kwargs())
            self._proc = proc
            reader = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
            reader.start()
            try:
                rc = proc.wait()
            except BaseException:
                self.interrupted = True
                self._stop(proc)
                reader.join()
                raise
            finally:
                # Held open while sluice runs: closing it tells sluice its
                # parent is gone.
                proc.stdin.close()
            reader.join()
        self._raise_callback_error()
        self._result(rc)

    def _read(self, stream) -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                self._line(raw.decode("utf-8", "replace"))

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        signals = 0
        while True:
            if proc.poll() is not None:
                return
            if signals < 2:
                try:
                    proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    return
                signals += 1
            try:
                proc.wait()
                return
            except KeyboardInterrupt:
                continue  # the next pass sends the second SIGINT

    # The async path.

    async def run_async(self) -> None:
        """run for an event loop: the loop reads the child's stderr and waits
        for it without blocking. Cancelling the task sends the child SIGINT,
        waits for it to exit, then lets the cancellation through."""
        with self._stdout() as out:
            argv = self._argv()
            proc = await asyncio.create_subprocess_exec(argv[0], *argv[1:], stdin=asyncio.subprocess.PIPE, stdout=out,
                                                        stderr=asyncio.subprocess.PIPE, **self._popen_kwargs())
            self._proc = proc
            reader = asyncio.ensure_future(self._read_async(proc.stderr))
            try:
                rc = await proc.wait()
                await reader
            except asyncio.CancelledError:
                self.interrupted = True
                await self._stop_async(proc, reader)
                raise
            finally:
                proc.stdin.close()  # see run
        self._raise_callback_error()
        self._result(rc)

    async def _read_async(self, stream) -> None:
        while True:
            raw = await stream.readline()
            if not raw:
                return
            self._line(raw.decode("utf-8", "replace"))

    async def _stop_async(self, proc, reader) -> None:
        if proc.returncode is None:
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
        signals = 1
        while True:
            if reader.cancelled():
                # asyncio.run's shutdown cancels every task, this reader too:
                # read on (sluice must not block on a full stderr pipe), and
                # do not await the cancelled task, which would raise at once,
                # forever.
                reader = asyncio.ensure_future(self._read_async(proc.stderr))
            try:
                await asyncio.shield(proc.wait())
                await asyncio.shield(reader)
                return
            except asyncio.CancelledError:
                if reader.cancelled():
                    continue
                # Cancelled again while draining: abort requests in flight.
                if signals < 2 and proc.returncode is None:
                    try:
                        proc.send_signal(signal.SIGINT)
                    except ProcessLookupError:
                        pass
                    signals += 1


# A whole call: the working folder's lock, the input, the child, the answer.
# A job has lock (a _work.Lock), inputs (path → bytes), child() and
# collect().


def _write_inputs(job) -> None:
    from . import _work

    for path, data in job.inputs.items():
        _work.write_atomic(path, data)


def _deliver(job) -> None:
    deliver = getattr(job, "deliver", None)
    if deliver is not None:
        deliver()


def run_job(job):
    """Runs job to its answer, holding its folder's lock throughout."""
    job.lock.acquire()
    try:
        child = _start(job)
        child.run()
        _deliver(job)
    except BaseException:
        job.lock.release(False)
        raise
    return _finish(job)  # it lets the lock go


def _start(job) -> "Child":
    # The input written and the binary found (its first use runs `sluice
    # version`).
    _write_inputs(job)
    return job.child()


def _finish(job):
    finished = False
    try:
        out = job.collect()
        finished = True
        return out
    finally:
        job.lock.release(finished)  # removing a temporary folder may take a while: on this thread too


async def in_executor(fn: Callable):
    """fn() on the loop's default executor: what is slow with a large input
    (building requests, fingerprints, writing and reading files, the
    caller's parse_response) must not stop the loop."""
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def run_job_async(job):
    """run_job for an event loop. Only the child's stderr and exit are the
    loop's; the lock's wait, the input, the version check and reading the
    answer run on executor threads."""
    loop = asyncio.get_running_loop()
    await _acquire_async(job.lock)
    handed_off = False  # a thread's task (or its done callback) lets the lock go

    async def in_thread(fn):
        nonlocal handed_off
        fut = loop.run_in_executor(None, fn, job)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The thread runs on; the lock goes once it is done.
            handed_off = True
            fut.add_done_callback(lambda f: (f.cancelled() or f.exception(), job.lock.release(False)))
            raise

    try:
        child = await in_thread(_start)
        await child.run_async()
        _deliver(job)
        handed_off = True  # _finish releases it
        return await in_thread(_finish)
    finally:
        if not handed_off:
            job.lock.release(False)


async def _acquire_async(lock) -> None:
    loop = asyncio.get_running_loop()
    cancel = threading.Event()
    fut = loop.run_in_executor(None, lock.acquire, cancel)
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:
        # The thread stops waiting; a lock it took meanwhile is let go.
        cancel.set()

        def done(f) -> None:
            if not f.cancelled() and f.exception() is None and f.result():
                lock.release(False)

        fut.add_done_callback(done)
        raise
