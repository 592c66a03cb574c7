"""Slurm accounting: `sacct --parsable2` -> allocations (one row per GPU) and queue.

    sacct --allusers --parsable2 --starttime ... --endtime ... \\
          --format=JobID,Account,User,Partition,Submit,Start,End,State,AllocTRES,ReqTRES,NodeList,Reason

With a header line (the default of sacct; it starts with JobID or JobIDRaw, or has either
anywhere) the fields may come in any order and extra fields are ignored; field names are
case-insensitive. Without a header (`--noheader`) the order must be DEFAULT_FIELDS, or the one
given in `ImportOptions.columns` (the `--format` list). `--parsable` (a trailing '|') and
`--parsable2` both work, with or without `-X` (job steps are skipped either way).

Job id: JobID (an array task prints `123_4`), else JobIDRaw. AllocTRES / ReqTRES: `gres/gpu=N`,
else the sum of `gres/gpu:<type>=N`; `billing`, `cpu`, `mem`, `node` are not GPUs. State keeps
its first word (`CANCELLED by 19032` is CANCELLED). Times with an offset are used as they are;
offset-less ones need `period.source_timezone`.

Mapping (row numbers are line numbers of the file):
- a job with GPUs in AllocTRES (`gres/gpu=N`, or the sum of `gres/gpu:<type>=N`) that has
  started -> N allocation rows, N / len(nodes) per node of NodeList (`gpu[001-004,007]` is
  expanded); gpu_id is `ImportOptions.gpu_map[(node, index)]` when the inventory maps it,
  else `<node>:gpu<index>`. The index comes from an `IDX:` list in a Gres / AllocGRES field
  when the export has one (`gpu:a100:4(IDX:0-3)`); a job already stored (ImportOptions.stored)
  keeps its cards; otherwise each node's lowest indices free of stored allocations and of the
  jobs placed before it (start order) that overlap it. allocation_id `slurm:<JobID>:<node>:<k>`.
  Local times follow the importers' one rule (`localize`: ambiguous or missing ones refused);
  a NodeList naming more than MAX_HOSTS nodes is refused before it is expanded.
  owner = Account (source `scheduler`), job_id = JobID, requested_gpus from ReqTRES.
- Start/End "Unknown", "None" or empty are missing. A RUNNING job has End "Unknown": it ends
  at `ImportOptions.end_at` when given, else it is reported unmapped.
- PENDING jobs -> queue rows (pool = Partition, gpus from ReqTRES, reason from Reason);
  a job that ran after waiting for a reason other than None -> a queue row whose `start`
  is its Start; a job cancelled while pending -> a queue row whose `start` is its End
  (the time it stopped waiting).
- Reason: QOS* / Assoc* limits -> quota, Resources -> resources, Priority -> priority,
  Dependency* -> dependency, anything else -> other.
- Job steps (`123.batch`, `123.0`, `123.extern`) repeat their job's resources: skipped, and
  counted in the notes; so are jobs without GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from ..config import Config
from . import UTC, ImportFailed, ImportOptions, LocalTimeError, Parsed, iso, local_time_refused, parse_time

DEFAULT_FIELDS = (
    "JobID", "Account", "User", "Partition", "Start", "End", "State", "AllocTRES", "NodeList", "ReqTRES",
    "Submit", "Reason",
)
_MISSING = {"", "unknown", "none", "none assigned", "n/a"}
_GRES_FIELDS = ("gres", "allocgres", "gresdetail", "gres_detail", "tresdetail")


def _missing(v: str | None) -> bool:
    return v is None or v.strip().lower() in _MISSING


# ---------------------------------------------------------------------------- parsing helpers


# More nodes than any cluster has (the largest ones have tens of thousands): a NodeList that
# expands to more is refused before it is expanded (`gpu[1-20000000]` would take gigabytes).
MAX_HOSTS = 100_000


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """`gpu[001-003,007],cpu1` -> gpu001 gpu002 gpu003 gpu007 cpu1 (zero padding kept).

    ValueError for a malformed list, or one naming more than `limit` hosts (counted first)."""
    text = text.strip()
    if _missing(text):
        return []
    parts = _split_top(text)
    total = sum(_count_one(p) for p in parts)
    if total > limit:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise ValueError(f"node list {shown!r} names {total:,} nodes, more than the {limit:,} a cluster can have")
    hosts: list[str] = []
    for part in parts:
        hosts.extend(_expand_one(part))
    return hosts


def _count_one(pattern: str) -> int:
    """How many hosts one pattern expands to: the product of its bracket lists' sizes."""
    n = 1
    for group in re.findall(r"\[([^\]]*)\]", pattern):
        size = 0
        for rng in group.split(","):
            lo, sep, hi = rng.strip().partition("-")
            size += int(hi) - int(lo) + 1 if sep and lo.isdigit() and hi.isdigit() else 1
        n *= max(size, 1)
    return n


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth != 0:
        raise ValueError(f"unbalanced brackets in node list {text!r}")
    parts.append(cur)
    return [p for p in (x.strip() for x in parts) if p]


def _expand_one(pattern: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end():]
    out = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            width = len(lo)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {rng!r} in node list {pattern!r}")
            nums = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        else:
            if not rng:
                raise ValueError(f"empty range in node list {pattern!r}")
            nums = [rng]
        for n in nums:
            out.extend(_expand_one(head + n + tail))
    return out


def gpu_count(tres: str | None) -> tuple[int | None, str | None]:
    """GPUs in a TRES string and their type: `gres/gpu=4` or `gres/gpu:a100=4` (summed)."""
    if _missing(tres):
        return None, None
    plain: int | None = None
    typed: dict[str, int] = {}
    for item in tres.split(","):
        if "=" not in item:
            continue
        key, val = item.split("=", 1)
        key = key.strip().lower()
        if not re.fullmatch(r"\d+", val.strip()):
            continue
        if key == "gres/gpu":
            plain = int(val)
        elif key.startswith("gres/gpu:"):
            typed[key.split(":", 1)[1]] = typed.get(key.split(":", 1)[1], 0) + int(val)
    if plain is not None:
        kind = next(iter(typed)) if len(typed) == 1 else None
        return plain, kind
    if typed:
        return sum(typed.values()), (next(iter(typed)) if len(typed) == 1 else None)
    return None, None


def gpu_indices(gres: str | None) -> list[int] | None:
    """The `IDX:0-1,3` list of a Gres detail field, or None."""
    if _missing(gres):
        return None
    m = re.search(r"IDX:([0-9,\-]+)", gres)
    if not m:
        return None
    out: list[int] = []
    for part in m.group(1).split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def queue_reason(reason: str | None) -> str:
    r = (reason or "").strip()
    low = r.lower()
    if low.startswith("qos") or low.startswith("assoc"):
        return "quota"
    if low == "resources":
        return "resources"
    if low == "priority":
        return "priority"
    if low.startswith("dependency"):
        return "dependency"
    return "other"


# ---------------------------------------------------------------------------- reading


@dataclass
class _Job:
    file: str
    line: int
    fields: dict[str, str]

    def get(self, name: str) -> str | None:
        return self.fields.get(name.lower())


def _records(path: Path, options: ImportOptions, parsed: Parsed) -> list[_Job]:
    try:
        content = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFailed(f"{path.name}: is not UTF-8 text (byte {exc.start})") from None
    lines = [(i, ln.rstrip("\r")) for i, ln in enumerate(content.split("\n"), start=1) if ln.strip()]
    if not lines:
        return []
    first = [f.strip() for f in lines[0][1].split("|")]
    if first and first[-1] == "":
        first = first[:-1]  # --parsable ends the header with '|' too
    if any(f.lower() in ("jobid", "jobidraw") for f in first):
        header = [f.lower() for f in first]
        lines = lines[1:]
        fixed = False
    else:
        header = [c.lower() for c in (options.columns or DEFAULT_FIELDS)]
        fixed = options.columns is None
    if lines and not any("|" in ln for _, ln in lines):
        raise ImportFailed(f"{path.name}: not a '|'-separated sacct --parsable2 export")
    jobs = []
    for number, line in lines:
        values = line.split("|")
        if len(values) == len(header) + 1 and values[-1] == "":
            values = values[:-1]  # --parsable (not 2) ends lines with '|'
        if fixed and len(values) == len(header) - 2:
            values = values + ["", ""]  # the default order without Submit and Reason
        if len(values) != len(header):
            parsed.skip(path, number, f"{len(values)} fields where the header has {len(header)}")
            continue
        jobs.append(_Job(path.name, number, dict(zip(header, (v.strip() for v in values)))))
    return jobs


class SlurmImporter:
    name = "slurm"
    summary = "Slurm sacct --parsable2 export -> allocations (one per GPU) and queue"

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        tz = config.period.source_timezone
        steps = cpu_only = 0
        placements: list[_Placement] = []
        for path in paths:
            for job in _records(path, options, parsed):
                jid = job.get("jobid") or job.get("jobidraw") or ""
                if not jid:
                    parsed.skip(job.file, job.line, "no JobID or JobIDRaw")
                    continue
                job.fields["jobid"] = jid
                if "." in jid:
                    steps += 1
                    continue
                state = (job.get("state") or "").split(" ")[0].upper()
                alloc_n, _ = gpu_count(job.get("alloctres"))
                req_n, _ = gpu_count(job.get("reqtres"))
                if not alloc_n and not req_n:
                    cpu_only += 1
                    continue
                if state == "PENDING":
                    self._queue(parsed, job, req_n or alloc_n, start=None)
                    continue
                start_text, end_text = job.get("start"), job.get("end")
                if _missing(start_text):
                    if state.startswith("CANCELLED") and not _missing(end_text):
                        self._queue(parsed, job, req_n or alloc_n, start=end_text)  # waited, then cancelled
                    else:
                        parsed.skip(job.file, job.line, f"job {jid} ({state or 'no state'}) has no Start time")
                    continue
                if not alloc_n:
                    parsed.skip(job.file, job.line, f"job {jid} started but AllocTRES has no GPUs")
                    continue
                if _missing(end_text):
                    if options.end_at is None:
                        parsed.skip(job.file, job.line,
                                    f"job {jid} ({state or 'no state'}) has End {end_text or 'empty'}: "
                                    "give the export time (--end-at) to end running jobs there")
                        continue
                    end_text = iso(options.end_at)
                try:
                    start, end = parse_time(start_text, tz), parse_time(end_text, tz)
                except LocalTimeError as exc:  # the importers' one local-time rule
                    field = "Start" if local_time_refused(start_text, tz) else "End"
                    parsed.skip(job.file, job.line, f"job {jid}: {field} {exc}")
                    continue
                if start is None or end is None:
                    bad = start_text if start is None else end_text
                    parsed.skip(job.file, job.line, f"job {jid}: cannot read time {bad!r}")
                    continue
                try:
                    nodes = expand_hostlist(job.get("nodelist") or "")
                except ValueError as exc:
                    parsed.skip(job.file, job.line, f"job {jid}: {exc}")
                    continue
                if not nodes:
                    parsed.skip(job.file, job.line, f"job {jid}: NodeList is empty")
                    continue
                if alloc_n % len(nodes):
                    parsed.skip(job.file, job.line,
                                f"job {jid}: {alloc_n} GPUs do not split evenly over {len(nodes)} nodes")
                    continue
                if job.get("reason") and queue_reason(job.get("reason")) != "other" and not _missing(job.get("submit")):
                    if local_time_refused(job.get("submit"), tz):  # the queue row's validation names the reason
                        self._queue(parsed, job, req_n or alloc_n, start=start_text)
                    elif (sub := parse_time(job.get("submit"), tz)) is not None and _lt(sub, start):
                        self._queue(parsed, job, req_n or alloc_n, start=start_text)
                placements.append(_Placement(job, nodes, alloc_n // len(nodes), start, end,
                                             _as_text(start, start_text), _as_text(end, end_text), req_n))
        self._place(parsed, placements, options)
        if steps:
            parsed.note("slurm job steps", f"{steps} job step lines skipped (their job's line carries the GPUs)")
        if cpu_only:
            parsed.note("slurm jobs without GPUs", f"{cpu_only} jobs request no GPUs and were skipped")
        return parsed

    def _queue(self, parsed: Parsed, job: _Job, gpus: int | None, start: str | None) -> None:
        part = job.get("partition") or ""
        jid = job.get("jobid")
        if "," in part:
            parsed.skip(job.file, job.line, f"job {jid} waits on several partitions ({part}): pool is ambiguous")
            return
        if _missing(job.get("submit")):
            parsed.skip(job.file, job.line, f"job {jid} is pending but the export has no Submit time")
            return
        parsed.add(
            "queue", job.file, job.line,
            job_id=jid, owner=job.get("account") or None, pool=part or None, gpus=gpus,
            submit=job.get("submit"), start=start, reason=queue_reason(job.get("reason")),
        )

    def _place(self, parsed: Parsed, jobs: list[_Placement], options: ImportOptions) -> None:
        """Cards per node, each job's a function of the job and of what the store holds.

        A job already stored keeps its cards (found by job id and node, whatever the id scheme
        that stored them). An IDX list names the cards. Any other job gets, per node, the lowest
        free indices: free of every stored allocation and of every job placed before it (start
        order) that overlaps it in time. The allocation id `slurm:<JobID>:<node>:<k>` (the
        job's k-th card there) never depends on the other rows of the file.
        """
        gpu_map = options.gpu_map or {}
        held = self._held(jobs, options)  # node -> [(start, end, gpu_id, job_id, allocation_id)] stored
        by_job: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (node, job) -> its stored (id, gpu)
        for node, rows in held.items():
            for _, _, g, j, a in rows:
                by_job.setdefault((node, j), []).append((a, g))
        fixed: list[tuple[_Placement, dict[str, list[tuple[str, str]]]]] = []
        free: list[_Placement] = []
        for p in jobs:
            explicit = None
            for f in _GRES_FIELDS:
                if p.job.get(f):
                    explicit = gpu_indices(p.job.get(f))
                    break
            if explicit is not None and len(explicit) != p.per_node:
                parsed.skip(p.job.file, p.job.line,
                            f"job {p.jid}: IDX lists {len(explicit)} GPUs, AllocTRES {p.per_node} per node")
                continue
            mine = {n: sorted(by_job.get((n, p.jid), [])) for n in p.nodes}
            counts = {len(v) for v in mine.values()}
            if counts != {0}:
                if counts != {p.per_node}:
                    parsed.skip(p.job.file, p.job.line,
                                f"job {p.jid}: stored on {sorted(counts)} cards per node, this export has "
                                f"{p.per_node}: import it with --replace once the store's rows are checked")
                    continue
                if explicit is not None:  # the export names the cards: they win (a conflict if they moved)
                    mine = {n: [(a, gpu_map.get((n, i), f"{n}:gpu{i}")) for (a, _), i in zip(v, explicit)]
                            for n, v in mine.items()}
                fixed.append((p, mine))
            elif explicit is not None:
                fixed.append((p, {n: [(f"slurm:{p.jid}:{n}:{k}", gpu_map.get((n, i), f"{n}:gpu{i}"))
                                      for k, i in enumerate(explicit)] for n in p.nodes}))
            else:
                free.append(p)
        # Occupancy per node: stored allocations of jobs not in this file, then the fixed jobs.
        in_file = {p.jid for p in jobs}
        busy: dict[str, list[tuple[datetime, datetime, str]]] = {}
        for node, rows in held.items():
            busy[node] = [(s0, e0, g) for s0, e0, g, j, _ in rows if j not in in_file]
        for p, mine in fixed:
            for node, cards in mine.items():
                busy.setdefault(node, []).extend((_naive(p.start), _naive(p.end), g) for _, g in cards)
                self._add(parsed, p, node, cards)
        for p in sorted(free, key=lambda q: (_naive(q.start), q.jid)):
            s0, e0 = _naive(p.start), _naive(p.end)
            for node in p.nodes:
                # In start order, what ended by this start can overlap no later job: drop it, so
                # the list holds the node's running jobs (plus stored ones still to come).
                here = busy[node] = [x for x in busy.get(node, []) if x[1] > s0]
                taken = {g for a, b, g in here if a < e0}
                cards, i = [], 0
                while len(cards) < p.per_node:
                    gpu = gpu_map.get((node, i), f"{node}:gpu{i}")
                    if gpu not in taken:
                        cards.append((f"slurm:{p.jid}:{node}:{len(cards)}", gpu))
                    i += 1
                busy.setdefault(node, []).extend((s0, e0, g) for _, g in cards)
                self._add(parsed, p, node, cards)

    @staticmethod
    def _held(jobs: list[_Placement], options: ImportOptions) -> dict[str, list]:
        """Stored Slurm allocations over the file's span, per node (the node is in the id)."""
        aware = [p for p in jobs if p.start.tzinfo is not None and p.end.tzinfo is not None]
        if options.stored is None or not aware:
            return {}
        t0, t1 = min(p.start for p in aware), max(p.end for p in aware)
        rows = options.stored("allocations", t0, t1).filter(
            (pl.col("source") == "scheduler") & pl.col("allocation_id").str.starts_with("slurm:"))
        held: dict[str, list] = {}
        for aid, gpu, a, b, jid in rows.select("allocation_id", "gpu_id", "start", "end", "job_id").iter_rows():
            parts = aid.split(":")
            if len(parts) >= 4:
                held.setdefault(parts[2], []).append((_naive(a), _naive(b), gpu, jid, aid))
        return held

    @staticmethod
    def _add(parsed: Parsed, p: _Placement, node: str, cards: list[tuple[str, str]]) -> None:
        for aid, gpu in cards:
            parsed.add(
                "allocations", p.job.file, p.job.line,
                allocation_id=aid, gpu_id=gpu, start=p.start_text, end=p.end_text,
                owner=p.job.get("account") or None, source="scheduler", job_id=p.jid, requested_gpus=p.req_n,
            )


@dataclass
class _Placement:
    """A started job with GPUs, read and checked, waiting for its cards."""

    job: _Job
    nodes: list[str]
    per_node: int
    start: datetime  # aware UTC, or naive when the export has no offset and no zone is set
    end: datetime
    start_text: str | None  # as written into the allocation (ISO with Z, or sacct's text)
    end_text: str | None
    req_n: int | None

    @property
    def jid(self) -> str:
        return self.job.get("jobid") or ""


def _as_text(ts: datetime | None, raw: str | None) -> str | None:
    """An aware time as ISO with Z; a naive one stays as sacct printed it (validation then names
    the missing offset or applies source_timezone)."""
    return iso(ts) if ts is not None and ts.tzinfo is not None else raw


def _naive(ts: datetime) -> datetime:
    """A comparable naive time: UTC wall clock for aware values, naive ones as they are."""
    return ts if ts.tzinfo is None else ts.astimezone(UTC).replace(tzinfo=None)


def _lt(a: datetime, b: datetime) -> bool:
    return _naive(a) < _naive(b)


IMPORTER = SlurmImporter()
