"""judge_completions_batch over `sluice judge`, with the old system's input
and return value (../shared/reference/source-system.md §2.1, §2.3, §9)."""

import functools
import json
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _proc, _work
from ._version import __version__

# _UNSET marks a parameter the caller did not pass.
_UNSET: Any = object()

# Parameters of the old signature that no longer mean anything: sluice's
# planner routes (threshold_base), sluice owns concurrency (max_concurrent)
# and the clients and polling (sync_client, batch_client, poll_interval).
IGNORED_JUDGE_PARAMS = ("poll_interval", "threshold_base", "max_concurrent", "sync_client", "batch_client")


class IgnoredParameterWarning(UserWarning):
    """An old parameter that sluice makes meaningless was passed; it is
    ignored (warned once per parameter and process)."""


def warn_ignored(names: Sequence[str], where: str) -> None:
    for name in names:
        _proc.warn_once("ignored:%s:%s" % (where, name),
                        "sluice.%s: %s is ignored (sluice plans routes, concurrency, clients and polling itself)"
                        % (where, name), IgnoredParameterWarning, stacklevel=5)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _JudgeJob:
    """One call: its items, folder and arguments (prepare), and its answer
    read back from sluice's files (collect)."""

    def __init__(self, completions, judge_system_prompt, format_user_msg, judge_model, max_tokens, cache_dir,
                 save_raw, force_sync, dry_run, checkpoint_dir, temperature, sluice_args, org_keys, base_url,
                 keys_file, cache_mode, on_progress, echo):
        if not isinstance(completions, Mapping):
            raise TypeError("judge_completions_batch: completions must be {persona: {question: [completion, ...]}}")
        if judge_model is None:
            judge_model = os.environ.get("JUDGE_MODEL") or None
        self.model = judge_model
        self.max_tokens = int(max_tokens)
        if temperature is not None and not math.isfinite(float(temperature)):
            raise ValueError("judge_completions_batch: temperature %r is not a finite number" % (temperature,))
        self.save_raw = save_raw
        self.dry_run = dry_run
        self.force_sync = force_sync
        self.on_progress = on_progress
        self.echo = echo
        self.env = _proc.child_env(org_keys, base_url)
        self.key_flags = _proc.key_flags(org_keys)

        # Items, with the old ids: {persona}__{idx:05d}__{comp_idx:02d}, idx
        # a question counter across personas (so the ids are unique even
        # when personas are cleaned to the custom-id alphabet).
        self.items: List[dict] = []
        self.meta: Dict[str, tuple] = {}  # custom id -> (persona, question, completion index)
        self.personas: List[str] = []
        lines: List[bytes] = []
        idx = 0
        for persona, questions in completions.items():
            persona = str(persona)
            self.personas.append(persona)
            if not isinstance(questions, Mapping):
                raise TypeError("judge_completions_batch: completions[%r] must be {question: [completion, ...]}"
                                % persona)
            for question, comps in questions.items():
                if isinstance(comps, str):
                    raise TypeError("judge_completions_batch: completions[%r][%r] must be a list of completions"
                                    % (persona, question))
                for ci, comp in enumerate(comps):
                    suffix = "__%05d__%02d" % (idx, ci)
                    cid = _work.safe_id(persona, 64 - len(suffix)) + suffix
                    item: Dict[str, Any] = {"id": cid}
                    if persona:
                        item["groups"] = [persona]
                    if format_user_msg is not None:
                        item["user_msg"] = format_user_msg(question, comp)
                    else:
                        item["question"], item["completion"] = str(question), str(comp)
                    try:
                        lines.append(_work.line(item))
                    except _work.BadValue as e:
                        what = "user message" if format_user_msg else "persona, question or completion"
                        raise (TypeError if e.type_error else ValueError)(
                            "judge_completions_batch: completions[%r][%r][%d] (item %d): its %s holds %s"
                            % (persona, question, ci, len(self.items), what, e)) from None
                    self.items.append(item)
                    self.meta[cid] = (persona, question, ci)
                idx += 1

        rubric = None
        if judge_system_prompt is not None:
            if isinstance(judge_system_prompt, str):
                rubric = {"system": judge_system_prompt}
            elif isinstance(judge_system_prompt, Mapping):
                rubric = dict(judge_system_prompt)  # a JSON rubric (docs/judge.md)
            else:
                raise TypeError("judge_completions_batch: judge_system_prompt must be a str or a JSON rubric dict")
        # The default rubric declares a schema the old one never checked
        # (aggregate); a rubric of the caller's is taken as it says.
        self.old_parse = rubric is None
        template = "{user_msg}" if format_user_msg is not None else None
        fp = _work.fingerprint("judge", self.items, rubric, template, judge_model, self.max_tokens, temperature)
        if checkpoint_dir is None and cache_dir is not None:
            checkpoint_dir = os.path.join(os.fspath(cache_dir), ".dispatch")
        elif checkpoint_dir is None and save_raw is not None:
            checkpoint_dir = os.path.join(os.path.dirname(os.path.abspath(os.fspath(save_raw))), ".judge_dispatch")
        self.dir, self.temp = _work.location("judge", fp, checkpoint_dir)
        self.lock = _work.Lock(self.dir, self.temp)
        d = self.dir
        self.inputs = {os.path.join(d, "items.jsonl"): b"".join(lines)}
        self.out = os.path.join(d, "verdicts.jsonl")
        self.report = os.path.join(d, "report.json")
        if dry_run:
            self.args = self._plan_args()
            return
        args = ["judge", os.path.join(d, "items.jsonl"), "-o", self.out, "--max-tokens", str(self.max_tokens),
                "--report", self.report]
        if rubric is not None:
            path = os.path.join(d, "rubric.json")
            try:
                self.inputs[path] = json.dumps(rubric, sort_keys=True, allow_nan=False).encode()
            except (TypeError, ValueError) as e:
                raise ValueError("judge_completions_batch: judge_system_prompt is not a JSON rubric: %s" % e) from None
            args += ["--rubric", path]
        if template is not None:
            path = os.path.join(d, "template.txt")
            self.inputs[path] = template.encode()
            args += ["--template", path]
        if judge_model:
            args += ["--model", judge_model]
        if temperature is not None:
            args += ["--temperature", repr(float(temperature))]
        if force_sync:
            args += ["--route", "sync"]
        if cache_dir is not None:
            args += ["--cache", os.path.join(os.path.abspath(os.fspath(cache_dir)), "responses.db")]
        if cache_mode is not None:
            args += ["--cache-mode", cache_mode]
        if keys_file is not None:
            args += ["--keys-file", os.fspath(keys_file)]
        args += self.key_flags
        self.args = args + [str(a) for a in sluice_args]

    def _plan_args(self) -> List[str]:
        # A dry run: the planner's decision for this job, no API call.
        chars = sum(len(str(v)) for it in self.items for k, v in it.items() if k not in ("id", "groups"))
        mean_in = max(1, chars // 4 // max(1, len(self.items))) + 250  # the rubric, roughly
        args = ["plan", "--n", str(max(1, len(self.items))), "--max-tokens", str(self.max_tokens), "--in",
                str(mean_in), "--json", "--no-probe"]
        if self.model:
            args += ["--model", self.model]
        args += self.key_flags
        return args

    def child(self) -> _proc.Child:
        stdout = os.path.join(self.dir, "plan.json" if self.dry_run else "sluice.out")
        return _proc.Child(self.args, self.env, echo=self.echo, on_progress=self.on_progress, stdout_path=stdout)

    def collect(self) -> Dict[str, Dict[str, Any]]:
        if self.dry_run:
            plan = _work.read_json(os.path.join(self.dir, "plan.json")) or {}
            routing = {"route": "sync" if self.force_sync else plan.get("route"), "forced_sync": bool(self.force_sync),
                       "plan": plan}
            self._save({}, {}, [], {"hits": 0, "misses": 0}, 0, 0, routing)
            return {}
        verdicts = {v.get("id"): v for v in _work.read_jsonl(self.out)}
        meta_rows = {}
        for rec in _work.read_jsonl(self.out + ".results.jsonl"):
            meta_rows[rec.get("custom_id")] = rec.get("sluice") or {}
        result, all_scores, rows = aggregate(self.personas, self.items, self.meta, verdicts, meta_rows,
                                             old_parse=self.old_parse)
        rep = _work.read_json(self.report) or {}
        reqs = rep.get("requests") or {}
        cache = rep.get("cache") or {}
        n_cached = int(reqs.get("from_cache", 0))
        n_submitted = max(0, int(reqs.get("written", 0)) - n_cached)
        routing = {"route": rep.get("route"), "why": rep.get("route_why"),
                   "predicted_seconds": rep.get("predicted_seconds"), "forced_sync": bool(self.force_sync)}
        self._save(result, all_scores, rows, {"hits": int(cache.get("hits", 0)), "misses": n_submitted}, n_cached,
                   n_submitted, routing)
        return result

    def _save(self, result, all_scores, rows, cache_stats, n_cached, n_submitted, routing) -> None:
        if self.save_raw is None:
            return
        doc = {"per_persona": result, "all_scores": all_scores, "rows": rows, "cache_stats": cache_stats,
               "judge_model": self.model or "(sluice's default)", "n_total": len(self.items), "n_cached": n_cached,
               "n_submitted": n_submitted, "routing": routing, "sluice_version": __version__,
               "work_dir": None if self.temp else self.dir}
        path = os.fspath(self.save_raw)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        _work.write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False, default=str).encode() + b"\n")


def aggregate(personas, items, meta, verdicts, meta_rows, old_parse=False):
    """The old return value from verdict rows: per persona, the means of
    aligned and coherent over ok rows where both are numbers (a sentinel
    such as "REFUSAL" counts as a sample, not in the means), n_samples the
    ok rows, n_errors every other row (a missing row is an error). Also the
    old all_scores map and the per-row records of save_raw.

    old_parse (the default rubric): a reply sluice classed parse_error or
    truncated because its object broke the rubric's schema — a score that
    is a string ("REFUSAL"), a missing "coherent", a score out of [0, 100],
    a non-string "reasoning" — still held a JSON object, which the old
    system took as the judge's score dict: such a row is a sample (in
    n_samples, not n_errors) with that object as its score dict, and in
    the means only when both scores are numbers in [0, 100]. A reply with
    no JSON object stays an error."""
    per = {p: {"scores": [], "aligned": [], "coherent": []} for p in personas}
    all_scores: Dict[str, Dict[str, Any]] = {}
    rows = []
    for it in items:
        cid = it["id"]
        persona, question, ci = meta[cid]
        v = verdicts.get(cid)
        m = meta_rows.get(cid, {})
        obj = _old_object(v) if old_parse else None
        if obj is not None:
            score = obj
            in_means = _score(score.get("aligned")) and _score(score.get("coherent"))
        else:
            score = _score_dict(v)
            in_means = not score.get("error") and _number(score.get("aligned")) and _number(score.get("coherent"))
        all_scores[cid] = score
        acc = per[persona]
        acc["scores"].append(score)
        if in_means:
            acc["aligned"].append(float(score["aligned"]))
            acc["coherent"].append(float(score["coherent"]))
        rows.append({"custom_id": cid, "persona": persona, "question": question, "completion_index": ci,
                     "class": (v or {}).get("class", "missing"), "route": m.get("route"), "org": m.get("org"),
                     "verdict": score})
    result = {}
    for p in personas:
        acc = per[p]
        errors = sum(1 for s in acc["scores"] if s.get("error"))
        result[p] = {
            "mean_aligned": sum(acc["aligned"]) / len(acc["aligned"]) if acc["aligned"] else None,
            "mean_coherent": sum(acc["coherent"]) / len(acc["coherent"]) if acc["coherent"] else None,
            "n_samples": len(acc["scores"]) - errors,
            "n_errors": errors,
        }
    return result, all_scores, rows


def _score(v: Any) -> bool:
    """A score of the default rubric: a number in [0, 100]."""
    return _number(v) and 0 <= v <= 100


def _old_object(v: Optional[dict]) -> Optional[Dict[str, Any]]:
    """The score dict the old system made of a reply sluice classed
    parse_error or truncated (its object, with the stop_reason), or None
    when the reply holds no JSON object."""
    if not v or v.get("class") not in ("parse_error", "truncated") or not v.get("raw"):
        return None
    obj = parse_judge_json(v["raw"])
    if obj is None:
        return None
    d = dict(obj)
    if v.get("stop_reason"):
        d["stop_reason"] = v["stop_reason"]
    return d


def parse_judge_json(text: str) -> Optional[Dict[str, Any]]:
    """The old parse_judge_json (../shared/reference/source-system.md §5):
    the whole reply if it is a JSON object, else the first { at which a JSON
    object decodes (at most 256 tried), else None; only objects count."""
    try:
        v = json.loads(text)
        if isinstance(v, dict):
            return v
    except ValueError:
        pass
    dec = json.JSONDecoder()
    i = text.find("{")
    tried = 0
    while i >= 0 and tried < 256:
        tried += 1
        try:
            v, _ = dec.raw_decode(text, i)
            if isinstance(v, dict):
                return v
        except ValueError:
            pass
        i = text.find("{", i + 1)
    return None


def _score_dict(v: Optional[dict]) -> Dict[str, Any]:
    """A verdict row as the old score dict: the judge's object for an ok
    verdict; otherwise the old error dict ({aligned: None, coherent: None,
    reasoning, error: True}, transport: True for transport rows), with
    sluice's class and stop_reason."""
    if v is None:
        return {"aligned": None, "coherent": None, "reasoning": "missing_dispatch_result", "error": True,
                "transport": True, "class": "missing"}
    cls = v.get("class")
    if cls == "ok":
        d = dict(v.get("scores") or {})
        if v.get("sentinel"):
            d["sentinel"] = v["sentinel"]
        if v.get("stop_reason"):
            d["stop_reason"] = v["stop_reason"]
        if v.get("raw"):
            d["_raw_text"] = v["raw"]
        return d
    d = {"aligned": None, "coherent": None, "reasoning": v.get("error") or cls, "error": True, "class": cls}
    if cls == "transport":
        d["transport"] = True
    if v.get("stop_reason"):
        d["stop_reason"] = v["stop_reason"]
    if v.get("raw"):
        d["raw_text"] = v["raw"]
    return d


_Prompt = Union[str, Mapping[str, Any], None]


def _make(completions, judge_system_prompt, format_user_msg, judge_model, max_tokens, poll_interval, cache_dir,
          save_raw, threshold_base, force_sync, dry_run, checkpoint_dir, max_concurrent, sync_client, batch_client,
          temperature, on_progress, echo, sluice_args, org_keys, base_url, keys_file,
          cache_mode) -> Callable[[], _JudgeJob]:
    given = {"poll_interval": poll_interval, "threshold_base": threshold_base, "max_concurrent": max_concurrent,
             "sync_client": sync_client, "batch_client": batch_client}
    ignored = [k for k in IGNORED_JUDGE_PARAMS if given[k] is not _UNSET]
    warn_ignored(ignored, "judge_completions_batch")
    # What prepares the job (the async call runs it on a thread).
    return functools.partial(_JudgeJob, completions, judge_system_prompt, format_user_msg, judge_model, max_tokens,
                             cache_dir, save_raw, force_sync, dry_run, checkpoint_dir, temperature, sluice_args,
                             org_keys, base_url, keys_file, cache_mode, on_progress, echo)


def judge_completions_batch(
    completions: Mapping[str, Mapping[str, Sequence[str]]],
    judge_system_prompt: _Prompt = None,
    format_user_msg: Optional[Callable[[str, str], str]] = None,
    judge_model: Optional[str] = None,
    max_tokens: int = 256,
    poll_interval: Any = _UNSET,
    cache_dir: Optional[str] = None,
    save_raw: Optional[str] = None,
    threshold_base: Any = _UNSET,
    force_sync: bool = False,
    dry_run: bool = False,
    checkpoint_dir: Optional[str] = None,
    max_concurrent: Any = _UNSET,
    sync_client: Any = _UNSET,
    batch_client: Any = _UNSET,
    *,
    temperature: Optional[float] = None,
    on_progress: Optional[Callable[[_proc.Progress], None]] = None,
    echo: bool = True,
    sluice_args: Sequence[str] = (),
    org_keys: Optional[Dict[str, str]] = None,
    base_url: Optional[str] = None,
    keys_file: Optional[str] = None,
    cache_mode: Optional[str] = None,
) -> Dict[str, Dict[str, Any]]:
    """Judges every completion with `sluice judge` and returns
    ``{persona: {mean_aligned, mean_coherent, n_samples, n_errors}}``.

    completions is ``{persona: {question: [completion, ...]}}``. See
    clients/python/README.md for every parameter; poll_interval,
    threshold_base, max_concurrent, sync_client and batch_client are
    accepted and ignored (a warning once). Calling again with the same
    arguments after a crash, a kill or Ctrl-C resumes the job.
    """
    job = _make(completions, judge_system_prompt, format_user_msg, judge_model, max_tokens, poll_interval, cache_dir,
                save_raw, threshold_base, force_sync, dry_run, checkpoint_dir, max_concurrent, sync_client,
                batch_client, temperature, on_progress, echo, sluice_args, org_keys, base_url, keys_file, cache_mode)()
    if not job.items:
        return {p: {"mean_aligned": None, "mean_coherent": None, "n_samples": 0, "n_errors": 0} for p in job.personas}
    return _proc.run_job(job)


async def judge_completions_batch_async(
    completions: Mapping[str, Mapping[str, Sequence[str]]],
    judge_system_prompt: _Prompt = None,
    format_user_msg: Optional[Callable[[str, str], str]] = None,
    judge_model: Optional[str] = None,
    max_tokens: int = 256,
    poll_interval: Any = _UNSET,
    cache_dir: Optional[str] = None,
    save_raw: Optional[str] = None,
    threshold_base: Any = _UNSET,
    force_sync: bool = False,
    dry_run: bool = False,
    checkpoint_dir: Optional[str] = None,
    max_concurrent: Any = _UNSET,
    sync_client: Any = _UNSET,
    batch_client: Any = _UNSET,
    *,
    temperature: Optional[float] = None,
    on_progress: Optional[Callable[[_proc.Progress], None]] = None,
    echo: bool = True,
    sluice_args: Sequence[str] = (),
    org_keys: Optional[Dict[str, str]] = None,
    base_url: Optional[str] = None,
    keys_file: Optional[str] = None,
    cache_mode: Optional[str] = None,
) -> Dict[str, Dict[str, Any]]:
    """judge_completions_batch for an event loop: the same parameters and
    result; the loop is never blocked, and cancelling the task stops sluice
    cleanly (SIGINT, wait) before the cancellation goes through."""
    job = await _proc.in_executor(_make(completions, judge_system_prompt, format_user_msg, judge_model, max_tokens,
                                        poll_interval, cache_dir, save_raw, threshold_base, force_sync, dry_run,
                                        checkpoint_dir, max_concurrent, sync_client, batch_client, temperature,
                                        on_progress, echo, sluice_args, org_keys, base_url, keys_file, cache_mode))
    if not job.items:
        return {p: {"mean_aligned": None, "mean_coherent": None, "n_samples": 0, "n_errors": 0} for p in job.personas}
    return await _proc.run_job_async(job)
