"""dispatch_calls over `sluice run`, with the old dispatcher's items,
callbacks and result categories (../shared/reference/source-system.md §2.1,
§2.3, §9)."""

import datetime as _dt
import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from . import _proc, _work
from .judge import _UNSET, warn_ignored

RESULT_OK = "ok"
RESULT_ERROR = "error"
RESULT_RATE_LIMITED = "rate_limited_exhausted"
RESULT_TRANSPORT = "transport_exhausted"

# Parameters of the old signature that no longer mean anything: sluice owns
# routing thresholds, retry budgets, polling, clients, its cache and clock.
IGNORED_DISPATCH_PARAMS = ("crossover_n", "max_attempts", "max_429_retries", "poll_interval", "async_clients",
                           "sync_clients", "cache", "now_fn")

_FAMILIES = ("sonnet", "haiku", "opus", "unknown")


@dataclass(frozen=True)
class DispatchItem:
    """One call: a stable item_id (it names the request across runs) and an
    opaque payload for build_request."""

    item_id: str
    payload: Any = None


@dataclass(frozen=True)
class DispatchResult:
    """The outcome of one item. category is ok, error (terminal: a parse
    failure, a 400/404/413), rate_limited_exhausted or transport_exhausted
    (both re-drivable: calling again sends the item again). org is the
    label of the organization that answered (None for a cache hit or a
    failure); route is sync, batch or cache."""

    item_id: str
    result: Any
    error: bool
    reason: str
    org: Optional[str]
    category: str
    route: Optional[str] = None


@dataclass(frozen=True)
class DispatchRoute:
    """The route sluice's planner chose for the items not yet done."""

    n_items: int
    path: str
    cost_pref: str
    reason: str

    def render(self) -> str:
        return "dispatch route: %s for %d items (cost_pref=%s): %s" % (self.path, self.n_items, self.cost_pref,
                                                                       self.reason)


def _custom_id(item_id: str) -> str:
    # The id itself when the Batch API's alphabet allows it, else its
    # SHA-256 (64 hex characters), as the old batch path did.
    return item_id if _work.id_ok(item_id) else hashlib.sha256(item_id.encode()).hexdigest()


class _DispatchJob:
    def __init__(self, items, build_request, parse_response, model, deadline, cost_pref, cache_dir, checkpoint_dir,
                 concurrency_overrides, chunk_size, max_concurrent_sub_batches, force_path, org_keys, on_route,
                 on_progress, echo, sluice_args, base_url, keys_file, cache_mode):
        if build_request is None or parse_response is None:
            raise TypeError("dispatch_calls: build_request and parse_response are required")
        if cost_pref not in ("balanced", "cost", "latency"):
            raise ValueError("dispatch_calls: cost_pref %r: use balanced, cost or latency" % (cost_pref,))
        if force_path not in (None, "sync", "batch"):
            raise ValueError("dispatch_calls: force_path %r: use None, sync or batch" % (force_path,))
        self.parse_response = parse_response
        self.on_route = on_route
        self.cost_pref = cost_pref
        self.on_progress = on_progress
        self.echo = echo
        self.env = _proc.child_env(org_keys, base_url)
        self.routed = False

        self.items = list(items)
        self.ids: Dict[str, str] = {}  # custom id -> item id
        rows = []
        lines = []
        for pos, item in enumerate(self.items):
            item_id = getattr(item, "item_id", None)
            if not isinstance(item_id, str) or not item_id:
                raise TypeError("dispatch_calls: every item needs a non-empty str item_id (DispatchItem)")
            try:
                item_id.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("dispatch_calls: items[%d]: item_id %r is not valid Unicode text (it holds a lone "
                                 "surrogate), so it cannot name a request" % (pos, item_id)) from None
            params = build_request(item)
            if not isinstance(params, dict):
                raise TypeError("dispatch_calls: build_request(%r) returned %s, not a dict of Messages params"
                                % (item_id, type(params).__name__))
            msgs = params.get("messages")
            if isinstance(msgs, list):
                for i, m in enumerate(msgs):
                    if isinstance(m, dict) and m.get("role") == "system":
                        raise ValueError("dispatch_calls: item %r: messages[%d] has role 'system'; the Messages API "
                                         "has no system role (use the top-level 'system' param)" % (item_id, i))
            if model and "model" not in params:
                params = dict(params, model=model)
            cid = _custom_id(item_id)
            if cid in self.ids:
                raise ValueError("dispatch_calls: item_id %r appears twice" % (item_id,))
            self.ids[cid] = item_id
            row = {"custom_id": cid, "params": params}
            try:
                lines.append(_work.line(row))
            except _work.BadValue as e:
                # As for the other build_request output the package checks:
                # raised before anything is sent, naming the item.
                raise (TypeError if e.type_error else ValueError)(
                    "dispatch_calls: items[%d] (item_id %r): build_request returned params holding %s"
                    % (pos, item_id, e)) from None
            rows.append(row)
        self.n = len(rows)
        fp = _work.fingerprint("run", rows)
        self.dir, self.temp = _work.location("run", fp, checkpoint_dir)
        self.lock = _work.Lock(self.dir, self.temp)
        d = self.dir
        requests = os.path.join(d, "requests.jsonl")
        self.inputs = {requests: b"".join(lines)}
        self.out = os.path.join(d, "results.jsonl")
        self.report = os.path.join(d, "report.json")
        args = ["run", requests, "-o", self.out, "--report", self.report, "--skip-invalid", "--prefer", cost_pref]
        if force_path:
            args += ["--route", force_path]
        if deadline is not None:
            if isinstance(deadline, _dt.datetime):
                if deadline.tzinfo is None:
                    deadline = deadline.replace(tzinfo=_dt.timezone.utc)  # naive reads as UTC, as before
                secs = (deadline - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
            elif isinstance(deadline, _dt.timedelta):
                secs = deadline.total_seconds()
            else:
                secs = float(deadline)
            args += ["--deadline", "%ds" % max(1, int(secs))]
        for fam, cap in (concurrency_overrides or {}).items():
            if fam not in _FAMILIES:
                raise ValueError("dispatch_calls: concurrency_overrides[%r]: families are %s" % (fam,
                                                                                                 ", ".join(_FAMILIES)))
            args += ["--cap-" + fam, str(int(cap))]
        if chunk_size is not None:
            args += ["--chunk", str(int(chunk_size))]
        if max_concurrent_sub_batches is not None:
            args += ["--window", str(int(max_concurrent_sub_batches))]
        if cache_dir is not None:
            args += ["--cache", os.path.join(os.path.abspath(os.fspath(cache_dir)), "responses.db")]
        if cache_mode is not None:
            args += ["--cache-mode", cache_mode]
        if keys_file is not None:
            args += ["--keys-file", os.fspath(keys_file)]
        args += _proc.key_flags(org_keys)
        self.args = args + [str(a) for a in sluice_args]

    def _line(self, line: str) -> None:
        if self.routed or self.on_route is None or 'msg="route chosen"' not in line:
            return
        f = _proc.parse_log_fields(line)
        self.routed = True
        self.on_route(DispatchRoute(self.n, f.get("route", "?"), self.cost_pref, f.get("why", "")))

    def child(self) -> _proc.Child:
        return _proc.Child(self.args, self.env, echo=self.echo, on_progress=self.on_progress, on_line=self._line,
                           stdout_path=os.path.join(self.dir, "sluice.out"))

    def deliver(self) -> None:
        """on_route from the report when sluice logged no choice (--route);
        called on the caller's thread (the async call's loop)."""
        if not self.routed and self.on_route is not None:
            rep = _work.read_json(self.report) or {}
            self.routed = True
            self.on_route(DispatchRoute(self.n, rep.get("route") or "none", self.cost_pref, rep.get("route_why") or ""))

    def collect(self) -> Dict[str, DispatchResult]:
        last: Dict[str, dict] = {}
        for rec in _work.read_jsonl(self.out):
            cid = rec.get("custom_id")
            if cid in self.ids:
                last[cid] = rec
        out = {}
        for cid, item_id in self.ids.items():
            out[item_id] = self._result(item_id, last.get(cid))
        return out

    def _result(self, item_id: str, rec: Optional[dict]) -> DispatchResult:
        if rec is None:
            return DispatchResult(item_id, None, True, "missing_dispatch_result", None, RESULT_TRANSPORT)
        meta = rec.get("sluice") or {}
        res = rec.get("result") or {}
        route, org, cls = meta.get("route"), meta.get("org") or None, meta.get("class")
        kind = res.get("type")
        if kind == "succeeded":
            msg = res.get("message") or {}
            text = next((b.get("text", "") for b in msg.get("content") or [] if b.get("type") == "text"), "")
            try:
                parsed = self.parse_response(text)
            except Exception as e:  # the caller's parser: any failure is this item's
                return DispatchResult(item_id, None, True, "parse_error: %s: %s" % (type(e).__name__, e), None,
                                      RESULT_ERROR, route)
            return DispatchResult(item_id, parsed, False, "ok", None if route == "cache" else org, RESULT_OK, route)
        if kind == "errored":
            err = res.get("error") or {}
            inner = err.get("error") if isinstance(err.get("error"), dict) else err
            etype, emsg = inner.get("type", "error"), inner.get("message", "")
            if cls == "transport":
                if etype == "rate_limit_error":
                    return DispatchResult(item_id, None, True, "rate_limited_exhausted (org=%s): %s" % (org, emsg),
                                          None, RESULT_RATE_LIMITED, route)
                return DispatchResult(item_id, None, True, "transport_exhausted (org=%s): %s: %s" % (org, etype, emsg),
                                      None, RESULT_TRANSPORT, route)
            return DispatchResult(item_id, None, True, "error: %s: %s" % (etype, emsg), None, RESULT_ERROR, route)
        # expired, canceled, or a row type sluice does not know: re-drivable.
        return DispatchResult(item_id, None, True, "batch_error: %s" % kind, None, RESULT_TRANSPORT, route)


def _make(items, build_request, parse_response, kw) -> Callable[[], _DispatchJob]:
    """Warns about ignored parameters (pointing at the caller's line) and
    returns what prepares the job: build_request for every item, the
    fingerprint, the input's bytes (the async call runs it on a thread)."""
    ignored = [k for k in IGNORED_DISPATCH_PARAMS if kw.pop(k) is not _UNSET]
    warn_ignored(ignored, "dispatch_calls")
    return functools.partial(_DispatchJob, items, build_request, parse_response, **kw)


def dispatch_calls(
    items: Iterable[Any],
    build_request: Optional[Callable[[Any], dict]] = None,
    parse_response: Optional[Callable[[str], Any]] = None,
    *,
    model: Optional[str] = None,
    deadline: Any = None,
    cost_pref: str = "balanced",
    cache_dir: Optional[str] = None,
    checkpoint_dir: Optional[str] = None,
    concurrency_overrides: Optional[Dict[str, int]] = None,
    crossover_n: Any = _UNSET,
    chunk_size: Optional[int] = None,
    max_concurrent_sub_batches: Optional[int] = None,
    max_attempts: Any = _UNSET,
    max_429_retries: Any = _UNSET,
    poll_interval: Any = _UNSET,
    force_path: Optional[str] = None,
    org_keys: Optional[Dict[str, str]] = None,
    async_clients: Any = _UNSET,
    sync_clients: Any = _UNSET,
    cache: Any = _UNSET,
    on_route: Optional[Callable[[DispatchRoute], None]] = None,
    now_fn: Any = _UNSET,
    on_progress: Optional[Callable[[_proc.Progress], None]] = None,
    echo: bool = True,
    sluice_args: Sequence[str] = (),
    base_url: Optional[str] = None,
    keys_file: Optional[str] = None,
    cache_mode: Optional[str] = None,
) -> Dict[str, DispatchResult]:
    """Sends build_request(item) for every item with `sluice run` and
    returns ``{item_id: DispatchResult}``, covering every item; a succeeded
    answer's first text block goes through parse_response. See
    clients/python/README.md for every parameter (the ignored ones warn
    once). Calling again with the same items resumes the job."""
    kw = dict(locals())
    for k in ("items", "build_request", "parse_response"):
        kw.pop(k)
    job = _make(items, build_request, parse_response, kw)()
    if not job.n:
        return {}
    return _proc.run_job(job)


async def dispatch_calls_async(
    items: Iterable[Any],
    build_request: Optional[Callable[[Any], dict]] = None,
    parse_response: Optional[Callable[[str], Any]] = None,
    *,
    model: Optional[str] = None,
    deadline: Any = None,
    cost_pref: str = "balanced",
    cache_dir: Optional[str] = None,
    checkpoint_dir: Optional[str] = None,
    concurrency_overrides: Optional[Dict[str, int]] = None,
    crossover_n: Any = _UNSET,
    chunk_size: Optional[int] = None,
    max_concurrent_sub_batches: Optional[int] = None,
    max_attempts: Any = _UNSET,
    max_429_retries: Any = _UNSET,
    poll_interval: Any = _UNSET,
    force_path: Optional[str] = None,
    org_keys: Optional[Dict[str, str]] = None,
    async_clients: Any = _UNSET,
    sync_clients: Any = _UNSET,
    cache: Any = _UNSET,
    on_route: Optional[Callable[[DispatchRoute], None]] = None,
    now_fn: Any = _UNSET,
    on_progress: Optional[Callable[[_proc.Progress], None]] = None,
    echo: bool = True,
    sluice_args: Sequence[str] = (),
    base_url: Optional[str] = None,
    keys_file: Optional[str] = None,
    cache_mode: Optional[str] = None,
) -> Dict[str, DispatchResult]:
    """dispatch_calls for an event loop (the old dispatch_calls was a
    coroutine): the same parameters and result; the loop is never blocked,
    and cancelling the task stops sluice cleanly before the cancellation
    goes through."""
    kw = dict(locals())
    for k in ("items", "build_request", "parse_response"):
        kw.pop(k)
    job = await _proc.in_executor(_make(items, build_request, parse_response, kw))
    if not job.n:
        return {}
    return await _proc.run_job_async(job)


__all__: List[str] = ["DispatchItem", "DispatchResult", "DispatchRoute", "dispatch_calls", "dispatch_calls_async",
                      "RESULT_OK", "RESULT_ERROR", "RESULT_RATE_LIMITED", "RESULT_TRANSPORT"]
