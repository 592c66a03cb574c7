#!/usr/bin/env python3
"""Generate a realistic, deterministic usage bundle for a synthetic GPU fleet (data contract v1).

    python sample_data/generate.py --out DIR [--gpus 24] [--days 7] [--seed 7]
        [--start 2026-10-05] [--format csv|parquet] [--telemetry-format csv|parquet]
        [--telemetry-interval 60]

or, from Python::

    from sample_data.generate import generate_bundle
    generate_bundle("out/", gpus=24, days=7, seed=7, start="2026-10-05", fmt="csv")

The fleet has three pools (h100-train, a100-infer, a100-mig), eight projects of three
tenants spelled differently by four source systems, a schedule of training, fine-tuning,
batch, interactive and inference work, 1-minute telemetry, per-request gateway logs,
costs, a rental rate, time-of-use tariffs, a queue, events and quotas. A fixed set of
deliberate anomalies (unmapped owner keys, a counter reset, a telemetry gap, an
over-allocation, an oversized job, ...) is placed at times that are fixed fractions of
the period, whatever the seed; ``anomalies.json`` in the bundle names them with ids and
times (sample_data/README.md describes them).

Same arguments -> byte-identical CSV output. Telemetry and requests are built with
vectorised numpy per card / per day and streamed to disk in batches, so a 1024-GPU,
30-day fleet fits in a few hundred MB of memory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

if __package__ in (None, ""):  # run as a script: make `cost_engine` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_engine import csv_guard  # noqa: E402
from cost_engine.contract import TABLES, schema  # noqa: E402

MIN = 60
HOUR = 3600
DAY = 86400
TS_FMT = "%Y-%m-%dT%H:%M:%SZ"
MIN_GPUS = 8

POOL_H100 = "h100-train"
POOL_INFER = "a100-infer"
POOL_MIG = "a100-mig"
CARDS_PER_NODE = 8

# accelerator model, total memory (MiB), idle power range (W), full-load power range (W)
H100 = ("H100-SXM-80GB", 81559.0, (68.0, 95.0), (655.0, 700.0))
A100 = ("A100-SXM-80GB", 81920.0, (58.0, 75.0), (385.0, 400.0))
# MIG layout of one A100-80GB: 3g.40gb + 2g.20gb + 2 x 1g.10gb = 7/7 slices
MIG_LAYOUT = (("3g.40gb", 3, 40192.0), ("2g.20gb", 2, 19968.0), ("1g.10gb", 1, 9728.0), ("1g.10gb", 1, 9728.0))

OWNERS = (
    ("research", "llm-pretrain", "LLM pre-training", "CC-4100"),
    ("research", "vision-ft", "Vision fine-tuning", "CC-4120"),
    ("research", "rlhf", "RLHF and alignment", "CC-4130"),
    ("research", "eval-harness", "Evaluation harness", "CC-4140"),
    ("product", "chat-assistant", "Chat assistant", "CC-5100"),
    ("product", "search-rerank", "Search re-ranking", "CC-5200"),
    ("product", "code-copilot", "Code copilot", "CC-5300"),
    ("platform", "shared-inference", "Shared inference platform", "CC-6100"),
)

ALIASES = (
    ("scheduler", "acct_llm_pt", "llm-pretrain"),
    ("scheduler", "acct_vision", "vision-ft"),
    ("scheduler", "acct_rlhf", "rlhf"),
    ("scheduler", "acct_eval", "eval-harness"),
    ("scheduler", "acct_search", "search-rerank"),
    ("scheduler", "acct_copilot", "code-copilot"),
    ("kubernetes", "ns-inference", "shared-inference"),
    ("kubernetes", "ns-chat", "chat-assistant"),
    ("kubernetes", "ns-search", "search-rerank"),
    ("kubernetes", "ns-copilot", "code-copilot"),
    ("kubernetes", "ns-vision-nb", "vision-ft"),
    ("kubernetes", "ns-rlhf-nb", "rlhf"),
    ("kubernetes", "ns-eval", "eval-harness"),
    ("gateway", "key-chat-prod", "chat-assistant"),
    ("gateway", "key-chat-staging", "chat-assistant"),
    ("gateway", "team-42", "code-copilot"),
    ("gateway", "key-search", "search-rerank"),
    ("gateway", "key-rlhf-gen", "rlhf"),
    ("gateway", "key-eval", "eval-harness"),
    ("finance", "PRJ-1001", "llm-pretrain"),
    ("finance", "PRJ-1002", "vision-ft"),
    ("finance", "PRJ-1003", "eval-harness"),
    ("finance", "PRJ-1004", "rlhf"),
    ("finance", "PRJ-1005", "chat-assistant"),
    ("finance", "PRJ-1006", "search-rerank"),
    ("finance", "PRJ-1007", "code-copilot"),
    ("finance", "PRJ-1008", "shared-inference"),
)

# Deliberately unmapped owner keys (no alias, not a project id): they land in `unattributed`.
UNMAPPED_GATEWAY_KEY = "key-legacy-7"
UNMAPPED_SCHEDULER_ACCOUNT = "acct_sandbox"

SERVICE_NAMESPACE = "ns-inference"
MODELS = ("llama-3.1-70b", "qwen2.5-coder-32b", "mistral-7b")
# per model: share of the dedicated service cards, load factor of the diurnal curve,
# prefill throughput (tokens/s per request), time per output token (ms), caller mix
MODEL_SPEC: dict[str, dict[str, Any]] = {
    "llama-3.1-70b": dict(
        cards=0.55, load=0.92, prefill_tps=3200.0, tpot_ms=26.0,
        mix={"key-chat-prod": 0.52, "key-chat-staging": 0.05, "key-rlhf-gen": 0.15,
             "key-eval": 0.12, "team-42": 0.06, UNMAPPED_GATEWAY_KEY: 0.10},
    ),
    "qwen2.5-coder-32b": dict(
        cards=0.30, load=0.80, prefill_tps=6000.0, tpot_ms=18.0,
        mix={"team-42": 0.80, "key-eval": 0.12, UNMAPPED_GATEWAY_KEY: 0.08},
    ),
    "mistral-7b": dict(
        cards=0.15, load=0.62, prefill_tps=18000.0, tpot_ms=9.0,
        mix={"key-search": 0.76, "key-chat-prod": 0.16, UNMAPPED_GATEWAY_KEY: 0.08},
    ),
}
# per gateway key: median uncached input tokens, probability of a prefix-cache hit,
# cached fraction of the prompt on a hit, median output tokens
KEY_TOKENS: dict[str, tuple[float, float, float, float]] = {
    "key-chat-prod": (900.0, 0.75, 0.65, 280.0),
    "key-chat-staging": (800.0, 0.50, 0.55, 300.0),
    "key-rlhf-gen": (450.0, 0.30, 0.40, 420.0),
    "key-eval": (700.0, 0.20, 0.50, 220.0),
    "team-42": (2400.0, 0.85, 0.70, 110.0),
    "key-search": (520.0, 0.10, 0.30, 12.0),
    UNMAPPED_GATEWAY_KEY: (850.0, 0.00, 0.00, 260.0),
}
# requests per dedicated service card per day (averaged over the diurnal curve)
REQUESTS_PER_CARD_DAY = 500.0
# Batch traffic the gateway reports as hourly usage buckets (one row standing for many
# requests): per model, the key that sends it and its output tokens/s per service card.
BATCH_TRAFFIC: dict[str, tuple[str, float]] = {
    "llama-3.1-70b": ("key-rlhf-gen", 320.0),
    "qwen2.5-coder-32b": ("team-42", 420.0),
    "mistral-7b": ("key-search", 900.0),
}

SLURM_BASE = 4_810_000


# ----------------------------------------------------------------------------- model


@dataclass
class Card:
    idx: int
    gpu_id: str
    pool: str
    node: str
    accelerator: str
    capacity: float
    kind: str  # h100 | a100 | mig
    mem_mib: float
    p_idle: float
    p_max: float
    profile: str | None = None  # MIG profile
    parent: str | None = None  # MIG: the physical card's gpu_id


@dataclass
class Job:
    cards: list[int]
    s: int  # seconds from the period start
    e: int
    owner: str
    source: str
    workload: str
    share: float = 1.0
    model: str | None = None
    requested: float | None = None
    job_id: str | None = None  # set later for scheduler jobs
    tag: str = ""  # internal: which scripted role the job plays
    inactive: tuple[int, ...] = ()  # cards of the job that never do any work
    alloc_ids: list[str] = field(default_factory=list)


@dataclass
class Effect:
    kind: str  # dip | stalls | reset | gap
    card: int
    s: int
    e: int


def _uuid(kind: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://ailedger.example/sample/{kind}/{name}"))


def _rh(hours: float) -> int:
    """Round hours to a whole hour, in seconds."""
    return int(round(hours)) * HOUR


def _split_pools(gpus: int) -> tuple[int, int, int]:
    if gpus < MIN_GPUS:
        raise ValueError(f"--gpus must be at least {MIN_GPUS} (got {gpus})")
    n_h100 = round(gpus * 0.50)
    n_infer = max(3, round(gpus * 0.35))
    n_mig = gpus - n_h100 - n_infer
    return n_h100, n_infer, max(1, n_mig)


# ----------------------------------------------------------------------------- fleet


class Fleet:
    """Inventory, schedule and anomalies of one generated fleet (everything but the samples)."""

    def __init__(self, gpus: int, days: int, seed: int, start: str):
        if days < 1:
            raise ValueError("--days must be >= 1")
        self.gpus, self.days, self.seed = gpus, days, seed
        d = date.fromisoformat(start)
        self.p0 = datetime(d.year, d.month, d.day, tzinfo=timezone.utc)
        self.T = days * DAY
        self.H = days * 24
        self.cards: list[Card] = []
        self.jobs: list[Job] = []
        self.effects: list[Effect] = []
        self.res: dict[int, list[tuple[int, int]]] = {}  # reserved intervals (no filler job)
        self.an: dict[str, Any] = {}
        self.n_h100, self.n_infer, self.n_mig = _split_pools(gpus)
        self._inventory()
        self._schedule()
        self._number()

    def rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, *key])

    def iso(self, t: int | float | None) -> str | None:
        if t is None:
            return None
        return (self.p0 + timedelta(seconds=int(t))).strftime(TS_FMT)

    # ---- inventory

    def _add(self, pool: str, node: str, spec: tuple, name: str, rng: np.random.Generator, **kw) -> Card:
        acc, mem, p_idle, p_max = spec
        c = Card(
            idx=len(self.cards), gpu_id=kw.pop("gpu_id", None) or "GPU-" + _uuid("gpu", name), pool=pool,
            node=node, accelerator=acc, capacity=kw.pop("capacity", 1.0), kind=kw.pop("kind"),
            mem_mib=kw.pop("mem_mib", mem), p_idle=round(float(rng.uniform(*p_idle)), 1),
            p_max=round(float(rng.uniform(*p_max)), 1), **kw,
        )
        self.cards.append(c)
        self.res[c.idx] = []
        return c

    def _inventory(self) -> None:
        rng = self.rng(1)
        self.h100 = []
        for i in range(self.n_h100):
            node = f"h100-node-{i // CARDS_PER_NODE + 1:02d}"
            self.h100.append(self._add(POOL_H100, node, H100, f"{node}/{i % 8}", rng, kind="h100").idx)
        self.h100_nodes = [self.h100[i:i + CARDS_PER_NODE] for i in range(0, self.n_h100, CARDS_PER_NODE)]
        self.infer = []
        for i in range(self.n_infer):
            node = f"a100-infer-node-{i // CARDS_PER_NODE + 1:02d}"
            self.infer.append(self._add(POOL_INFER, node, A100, f"{node}/{i % 8}", rng, kind="a100").idx)
        self.mig: list[int] = []
        self.mig_parents: dict[str, list[str]] = {}
        for i in range(self.n_mig):
            node = f"a100-mig-node-{i // CARDS_PER_NODE + 1:02d}"
            parent = "GPU-" + _uuid("gpu", f"{node}/{i % 8}")
            self.mig_parents[parent] = []
            for j, (prof, slices, mem) in enumerate(MIG_LAYOUT):
                c = self._add(
                    POOL_MIG, node, A100, f"{node}/{i % 8}/mig{j}", rng, kind="mig",
                    gpu_id="MIG-" + _uuid("mig", f"{node}/{i % 8}/{j}"), capacity=slices / 7,
                    mem_mib=mem, profile=prof, parent=parent,
                )
                self.mig.append(c.idx)
                self.mig_parents[parent].append(c.gpu_id)

    # ---- helpers

    def reserve(self, cards: list[int], s: int, e: int) -> None:
        for c in cards:
            self.res[c].append((s, e))

    def job(self, cards: list[int], s: int, e: int, owner: str, source: str, workload: str, **kw) -> Job:
        j = Job(cards=list(cards), s=int(s), e=int(e), owner=owner, source=source, workload=workload, **kw)
        self.jobs.append(j)
        return j

    def scripted(self, cards: list[int], s: int, e: int, owner: str, workload: str, **kw) -> Job:
        self.reserve(cards, s, e)
        return self.job(cards, s, e, owner, "scheduler", workload, requested=kw.pop("requested", len(cards)), **kw)

    def fit(self, cards: list[int], s: int, dur: int) -> int:
        moved = True
        while moved:
            moved = False
            for c in cards:
                for bs, be in self.res[c]:
                    if s < be and s + dur > bs:
                        s, moved = be + 120, True
        return s

    def fill(self, groups: list[list[int]], sampler: Callable, rng: np.random.Generator, gap_mean: float) -> None:
        """Greedy scheduler: place sampled jobs at the earliest time their cards are free."""
        free = {}
        for g in groups:
            t0 = -int(rng.uniform(0, 36 * HOUR))  # the fleet was busy before the period began
            for c in g:
                free[c] = t0
        pairs = [(a, b) for a, b in zip(groups, groups[1:]) if len(a) == CARDS_PER_NODE == len(b)]
        while True:
            size, dur, owner, workload = sampler(rng)
            gap = 300 + int(rng.exponential(gap_mean))
            best = self._place(groups, pairs, free, size, dur, gap)
            if best is None or best[0] >= self.T:
                size, workload = 1, ("fine_tuning" if workload == "training" else workload)
                dur = min(dur, int(rng.uniform(2, 10) * HOUR))
                best = self._place(groups, pairs, free, 1, dur, gap)
                if best is None or best[0] >= self.T:
                    return
            s, cs = best
            for c in cs:
                free[c] = s + dur
            if s + dur > 0:
                self.job(cs, s, s + dur, owner, "scheduler", workload, requested=float(size))

    def _place(self, groups, pairs, free, size, dur, gap):
        best = None
        if size <= CARDS_PER_NODE:
            cands = [sorted(g, key=lambda c: (free[c], c))[:size] for g in groups if len(g) >= size]
        else:
            cands = [a + b for a, b in pairs]
        for cs in cands:
            s = self.fit(cs, max(free[c] for c in cs) + gap, dur)
            if best is None or s < best[0]:
                best = (s, cs)
        return best

    # ---- schedule

    def _schedule(self) -> None:
        H, T = self.H, self.T
        nodes = self.h100_nodes
        an = self.an
        # -- scripted h100 jobs (fixed fractions of the period, whatever the seed)
        if self.n_h100 >= 2 * CARDS_PER_NODE:
            big_cards = nodes[0] + nodes[1]
        else:
            big_cards = list(self.h100)
        b0, b1 = _rh(0.04 * H), _rh(0.36 * H)
        big = self.scripted(big_cards, b0, b1, "acct_llm_pt", "training", tag="big")
        bd = (b1 - b0) / HOUR
        # storage bottleneck: the whole job stalls on the shared file system for 90 minutes
        sb0 = b0 + _rh(0.5 * bd)
        self.effects += [Effect("dip", c, sb0, sb0 + 90 * MIN) for c in big_cards]
        # counter reset (driver reload) on the job's second card
        rs = b0 + _rh(0.3 * bd) + 17 * MIN
        self.effects.append(Effect("reset", big_cards[1], rs, rs))
        # over-allocation: a stale 1-hour eval allocation on a card the big job holds
        c0 = b0 + _rh(0.2 * bd)
        conflict = self.job([big_cards[2]], c0, c0 + HOUR, "acct_eval", "scheduler", "batch_inference",
                            requested=1.0, tag="conflict")
        # oversized request: 8 cards asked for and allocated, only 6 ever active
        ov_cards = nodes[0][:CARDS_PER_NODE]
        o0, o1 = _rh(0.40 * H), _rh(0.58 * H)
        ov = self.scripted(ov_cards, o0, o1, "acct_vision", "fine_tuning", tag="oversized",
                           inactive=tuple(ov_cards[-2:]))
        # the oversized job first waited on the research quota while its node sat free
        q = min(6 * HOUR, max(HOUR, _rh(0.04 * H)))
        self.reserve(ov_cards, o0 - q, o0)
        # maintenance window on the last h100 node: drained, nothing allocated
        m_node = nodes[-1]
        m0 = _rh(0.62 * H)
        m1 = m0 + min(4 * HOUR, max(HOUR, _rh(0.08 * H)))
        self.reserve(m_node, m0, m1)
        # data-loading stalls: a training job on node 2 (or 1) with periodic input stalls
        st_cards = nodes[1 % len(nodes)]
        s0, s1 = _rh(0.72 * H), _rh(0.95 * H)
        stall = self.scripted(st_cards, s0, s1, "acct_rlhf", "training", tag="stall")
        ls0 = s0 + _rh(0.4 * (s1 - s0) / HOUR)
        self.effects += [Effect("stalls", c, s0, s1) for c in st_cards]
        self.effects += [Effect("dip", c, ls0, ls0 + HOUR) for c in st_cards]

        # -- h100 filler
        def h100_job(rng: np.random.Generator):
            r = rng.random()
            multi = self.n_h100 >= 2 * CARDS_PER_NODE
            if r < 0.40:
                size = 16 if multi and rng.random() < 0.3 else min(8, max(len(g) for g in nodes))
                dur = float(np.clip(rng.lognormal(math.log(20), 0.5), 4, 72))
                return size, int(dur * HOUR), ("acct_llm_pt" if rng.random() < 0.7 else "acct_rlhf"), "training"
            if r < 0.75:
                size = int(rng.choice([1, 2, 4, 8], p=[0.2, 0.3, 0.3, 0.2]))
                dur = rng.uniform(2, 16)
                owner = str(rng.choice(["acct_vision", "acct_copilot", "acct_rlhf"], p=[0.45, 0.35, 0.2]))
                return size, int(dur * HOUR), owner, "fine_tuning"
            if r < 0.90:
                size = int(rng.choice([1, 2, 4]))
                return size, int(rng.uniform(1, 6) * HOUR), str(rng.choice(["acct_eval", "acct_search"])), "batch_inference"
            return 1, int(rng.uniform(1, 4) * HOUR), str(rng.choice(["acct_vision", "acct_rlhf"])), "interactive"

        self.fill(nodes, h100_job, self.rng(2), gap_mean=1.5 * HOUR)

        # -- a100-infer: model services, one time-sliced card, batch cards
        rng = self.rng(3)
        ts_card = self.infer[-1]
        rest = self.infer[:-1]
        n_batch = int(len(rest) * 0.2)
        service = rest[: len(rest) - n_batch]
        batch_cards = rest[len(rest) - n_batch:]
        n_llama = max(1, round(len(service) * MODEL_SPEC["llama-3.1-70b"]["cards"]))
        n_qwen = max(1, round(len(service) * MODEL_SPEC["qwen2.5-coder-32b"]["cards"]))
        n_llama = min(n_llama, len(service) - 1)
        n_qwen = min(n_qwen, len(service) - n_llama)
        self.model_cards = {
            "llama-3.1-70b": service[:n_llama],
            "qwen2.5-coder-32b": service[n_llama:n_llama + n_qwen],
            "mistral-7b": service[n_llama + n_qwen:],
        }

        def svc(model: str, cards: list[int], s: int, e: int, share: float = 1.0, tag: str = "") -> Job:
            return self.job(cards, s, e, SERVICE_NAMESPACE, "kubernetes", "inference", share=share, model=model,
                            job_id=f"svc-{model}", tag=tag)

        def before() -> int:
            return -int(rng.integers(3 * DAY, 20 * DAY))

        def after() -> int:
            return T + int(rng.integers(2 * DAY, 15 * DAY))

        # degraded hardware on the first llama card: the pod is evicted, the card sits out
        g0 = _rh(0.80 * H)
        g1 = g0 + min(3 * HOUR, max(HOUR, _rh(0.1 * H)))
        d_card = self.model_cards["llama-3.1-70b"][0]
        # rollout of a new qwen revision: pods restart one by one
        roll = _rh(0.3 * H)
        for m, cards in self.model_cards.items():
            for k, c in enumerate(cards):
                s, e = before(), after()
                if c == d_card:
                    svc(m, [c], s, g0)
                    svc(m, [c], g1, e)
                elif m == "qwen2.5-coder-32b":
                    r = roll + k * 5 * MIN
                    svc(m, [c], s, r)
                    svc(m, [c], r + 150, e)
                else:
                    svc(m, [c], s, e)
        # time-sliced card: a mistral-7b replica at share 0.5 + nightly eval batch at 0.5
        svc("mistral-7b", [ts_card], before(), after(), share=0.5, tag="timesliced")
        for d in range(self.days):
            s = d * DAY + HOUR + int(rng.integers(0, 30)) * MIN
            self.job([ts_card], s, s + int(rng.uniform(4, 5) * HOUR), "acct_eval", "scheduler", "batch_inference",
                     share=0.5, requested=0.5, tag="timesliced")
        # telemetry gap on the first qwen card (the exporter was down)
        gap_card = self.model_cards["qwen2.5-coder-32b"][0]
        gp0 = _rh(0.5 * H)
        self.effects.append(Effect("gap", gap_card, gp0, gp0 + 2 * HOUR))

        def batch_job(rng: np.random.Generator):
            r = rng.random()
            if r < 0.5:
                return 1, int(rng.uniform(2, 9) * HOUR), "acct_search", "batch_inference"
            if r < 0.8:
                return 1, int(rng.uniform(1, 5) * HOUR), "acct_eval", "batch_inference"
            return 1, int(rng.uniform(3, 12) * HOUR), "acct_copilot", "fine_tuning"

        if batch_cards:
            self.fill([[c] for c in batch_cards], batch_job, self.rng(4), gap_mean=3 * HOUR)

        # -- a100-mig: interactive notebooks (kubernetes) + the unmapped sandbox account
        sb_card = self.mig[2]  # the first 1g.10gb instance
        sandbox = []
        for s, dur in ((_rh(0.25 * H), 40 * MIN), (_rh(0.6 * H) + 30 * MIN, 25 * MIN)):
            sandbox.append(self.scripted([sb_card], s, s + dur, UNMAPPED_SCHEDULER_ACCOUNT, "other",
                                         requested=1.0, tag="sandbox"))
        rng = self.rng(5)
        nb_owners = ["ns-vision-nb", "ns-rlhf-nb", "ns-eval", "ns-chat", "ns-copilot", "ns-search"]
        nb_p = [0.28, 0.22, 0.15, 0.12, 0.15, 0.08]
        weekday0 = self.p0.weekday()
        n_nb = 0
        for c in self.mig:
            card = self.cards[c]
            busy = list(self.res[c])
            for d in range(self.days):
                weekend = (weekday0 + d) % 7 >= 5
                for _ in range(int(rng.poisson(0.3 if weekend else 1.4))):
                    s = d * DAY + int(rng.uniform(6.5, 17) * HOUR)
                    long = card.profile == "3g.40gb" and rng.random() < 0.35
                    dur = int(rng.uniform(3, 10) * HOUR) if long else int(rng.uniform(0.75, 5) * HOUR)
                    owner = str(rng.choice(nb_owners, p=nb_p))
                    if any(s < be + 300 and s + dur + 300 > bs for bs, be in busy):
                        continue
                    busy.append((s, s + dur))
                    n_nb += 1
                    self.job([c], s, s + dur, owner, "kubernetes", "fine_tuning" if long else "interactive",
                             job_id=f"nb-{n_nb:05d}")

        # -- the queue
        n_big = 16 if self.n_h100 >= 16 else self.n_h100
        qr = _rh(0.55 * H)
        self.queue = [
            dict(job=ov, owner="acct_vision", pool=POOL_H100, gpus=float(len(ov_cards)), submit=o0 - q, start=o0,
                 reason="quota"),
            dict(job=None, owner="acct_llm_pt", pool=POOL_H100, gpus=float(n_big), submit=qr, start=None,
                 reason="resources"),
            dict(job=None, owner="acct_rlhf", pool=POOL_H100, gpus=4.0, submit=_rh(0.85 * H), start=None,
                 reason="quota"),
            dict(job=None, owner="acct_search", pool=POOL_INFER, gpus=1.0, submit=_rh(0.7 * H) + 20 * MIN,
                 start=None, reason="dependency"),
        ]

        # -- events
        self.events = [
            dict(start=m0, end=m1, kind="maintenance", node=self.cards[m_node[0]].node),
            dict(start=g0, end=g1, kind="degraded_hardware", gpu_id=self.cards[d_card].gpu_id),
            dict(start=sb0, end=sb0 + 90 * MIN, kind="storage_bottleneck", pool=POOL_H100),
        ] + [dict(start=ls0, end=ls0 + HOUR, kind="data_loading", gpu_id=self.cards[c].gpu_id) for c in st_cards]

        self._roles = dict(big=big, conflict=conflict, oversized=ov, stall=stall, sandbox=sandbox)
        self._marks = dict(sb0=sb0, rs=rs, c0=c0, q=q, m0=m0, m1=m1, ls0=ls0, g0=g0, g1=g1, gp0=gp0, roll=roll,
                           d_card=d_card, gap_card=gap_card, ts_card=ts_card, m_node=m_node, qr=qr,
                           batch_cards=batch_cards)

    # ---- ids

    def _number(self) -> None:
        """Slurm job ids in start order, allocation ids in (start, card) order."""
        jobs = [j for j in self.jobs if j.e > 0 and j.s < self.T or j.tag]
        self.jobs = jobs
        sched = sorted((j for j in jobs if j.source == "scheduler"), key=lambda j: (j.s, j.cards[0], j.e))
        pending = [qe for qe in self.queue if qe["job"] is None]
        order = sorted([(j.s, 0, i) for i, j in enumerate(sched)] + [(qe["submit"], 1, i) for i, qe in enumerate(pending)])
        for n, (_, kind, i) in enumerate(order):
            jid = f"slurm-{SLURM_BASE + n * 7 + 3}"
            if kind == 0:
                sched[i].job_id = jid
            else:
                pending[i]["job_id"] = jid
        for qe in self.queue:
            if qe["job"] is not None:
                qe["job_id"] = qe["job"].job_id
        rows = sorted(((j.s, c, j.e, k, j) for k, j in enumerate(jobs) for c in j.cards), key=lambda r: r[:4])
        for n, (_, c, _, _, j) in enumerate(rows):
            j.alloc_ids.append(f"alloc-{n + 1:06d}")
        self.alloc_rows = [(f"alloc-{n + 1:06d}", c, j) for n, (_, c, _, _, j) in enumerate(rows)]
        # per-card allocation lists for telemetry
        self.by_card: dict[int, list[Job]] = {c.idx: [] for c in self.cards}
        for _, c, j in self.alloc_rows:
            self.by_card[c].append(j)
        self.fx_by_card: dict[int, list[Effect]] = {c.idx: [] for c in self.cards}
        for fx in self.effects:
            self.fx_by_card[fx.card].append(fx)

    # ---- manifest

    def anomalies(self, telemetry_interval_s: int) -> dict[str, Any]:
        r, m, C, iso = self._roles, self._marks, self.cards, self.iso

        def aid(job: Job, card: int) -> str:
            return job.alloc_ids[job.cards.index(card)]

        big, ov, stall = r["big"], r["oversized"], r["stall"]
        reset_card = big.cards[1]
        conflict_card = big.cards[2]
        gap_n = len(range(_ceil_div(m["gp0"], telemetry_interval_s), _ceil_div(m["gp0"] + 2 * HOUR, telemetry_interval_s)))
        ts_jobs = [(cid, j) for cid, c, j in self.alloc_rows if c == m["ts_card"]]
        edge = [(cid, j) for cid, _, j in self.alloc_rows if j.s < 0 or j.e > self.T]
        return {
            "period": {"start": iso(0), "end": iso(self.T), "days": self.days},
            "pools": {POOL_H100: self.n_h100, POOL_INFER: self.n_infer, POOL_MIG: self.n_mig},
            "mig_cards": self.mig_parents,
            "model_cards": {k: [C[c].gpu_id for c in v] + ([C[m["ts_card"]].gpu_id] if k == "mistral-7b" else [])
                            for k, v in self.model_cards.items()},
            "unmapped_keys": [
                {"table": "requests", "source": "gateway", "key": UNMAPPED_GATEWAY_KEY},
                {"table": "allocations", "source": "scheduler", "key": UNMAPPED_SCHEDULER_ACCOUNT,
                 "allocation_ids": [j.alloc_ids[0] for j in r["sandbox"]],
                 "job_ids": [j.job_id for j in r["sandbox"]],
                 "gpu_id": C[r["sandbox"][0].cards[0]].gpu_id},
            ],
            "counter_reset": {"gpu_id": C[reset_card].gpu_id, "ts": iso(_ceil_div(m["rs"], telemetry_interval_s) * telemetry_interval_s),
                              "allocation_id": aid(big, reset_card), "job_id": big.job_id},
            "telemetry_gap": {"gpu_id": C[m["gap_card"]].gpu_id, "start": iso(m["gp0"]), "end": iso(m["gp0"] + 2 * HOUR),
                              "missing_samples": gap_n},
            "over_allocation": {"gpu_id": C[conflict_card].gpu_id, "start": iso(m["c0"]), "end": iso(m["c0"] + HOUR),
                                "allocation_ids": [aid(big, conflict_card), r["conflict"].alloc_ids[0]],
                                "job_ids": [big.job_id, r["conflict"].job_id]},
            "time_sliced": {"gpu_id": C[m["ts_card"]].gpu_id, "allocation_ids": [cid for cid, _ in ts_jobs],
                            "share": 0.5},
            "multi_node_job": {"job_id": big.job_id, "gpus": len(big.cards), "start": iso(big.s), "end": iso(big.e),
                               "nodes": sorted({C[c].node for c in big.cards})},
            "oversized_job": {"job_id": ov.job_id, "requested_gpus": ov.requested, "start": iso(ov.s), "end": iso(ov.e),
                              "inactive_gpu_ids": [C[c].gpu_id for c in ov.inactive],
                              "inactive_allocation_ids": [aid(ov, c) for c in ov.inactive]},
            "storage_bottleneck": {"pool": POOL_H100, "start": iso(m["sb0"]), "end": iso(m["sb0"] + 90 * MIN),
                                   "job_id": big.job_id},
            "data_loading": {"job_id": stall.job_id, "start": iso(m["ls0"]), "end": iso(m["ls0"] + HOUR),
                             "gpu_ids": [C[c].gpu_id for c in stall.cards],
                             "job_start": iso(stall.s), "job_end": iso(stall.e)},
            "maintenance": {"node": C[m["m_node"][0]].node, "start": iso(m["m0"]), "end": iso(m["m1"])},
            "degraded_hardware": {"gpu_id": C[m["d_card"]].gpu_id, "start": iso(m["g0"]), "end": iso(m["g1"])},
            "qwen_rollout": {"start": iso(m["roll"])},
            "queue": [{"job_id": qe["job_id"], "owner": qe["owner"], "pool": qe["pool"], "gpus": qe["gpus"],
                       "submit": iso(qe["submit"]), "start": iso(qe["start"]), "reason": qe["reason"]}
                      for qe in self.queue],
            "edge_allocations": {
                "start_before_period": [cid for cid, j in edge if j.s < 0],
                "end_after_period": [cid for cid, j in edge if j.e > self.T],
            },
            "direct_cost": {"cost_id": "cost-direct-001", "owner": "PRJ-1004", "source": "finance"},
        }


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------- small tables


def _frame(table: str, rows: list[dict]) -> pl.DataFrame:
    sch = schema(table)
    cols = {name: [r.get(name) for r in rows] for name in sch.names()}
    out = {}
    for name, dtype in sch.items():
        if dtype == pl.Datetime("us", "UTC"):
            out[name] = pl.Series(name, cols[name], dtype=pl.Int64) * 1_000_000
            out[name] = out[name].cast(pl.Datetime("us", "UTC"))
        else:
            out[name] = pl.Series(name, cols[name], dtype=dtype)
    return pl.DataFrame(out)


def _epoch(fleet: Fleet, t: int | None) -> int | None:
    return None if t is None else int(fleet.p0.timestamp()) + int(t)


def small_tables(fleet: Fleet) -> dict[str, pl.DataFrame]:
    f, C, T, H = fleet, fleet.cards, fleet.T, fleet.H
    ep = lambda t: _epoch(f, t)  # noqa: E731
    t = {}
    t["inventory"] = _frame("inventory", [
        dict(gpu_id=c.gpu_id, pool=c.pool, node=c.node, accelerator=c.accelerator + (f" MIG {c.profile}" if c.profile else ""),
             capacity=c.capacity) for c in C
    ])
    t["owners"] = _frame("owners", [dict(tenant=a, project=b, display_name=c, cost_center=d) for a, b, c, d in OWNERS])
    t["aliases"] = _frame("aliases", [dict(source=a, key=b, project=c) for a, b, c in ALIASES])
    t["allocations"] = _frame("allocations", [
        dict(allocation_id=aid, gpu_id=C[c].gpu_id, start=ep(j.s), end=ep(j.e), owner=j.owner, source=j.source,
             share=j.share, workload=j.workload, job_id=j.job_id, model=j.model, requested_gpus=j.requested)
        for aid, c, j in f.alloc_rows
    ])
    # ---- costs: the span of the generated period
    hours = float(H)
    months = hours / 730.0
    n_h, n_i, n_m = f.n_h100, f.n_infer, f.n_mig
    n_h_nodes, n_m_nodes = len(f.h100_nodes), math.ceil(n_m / CARDS_PER_NODE)
    n_all = n_h + n_i + n_m
    c_rows = [
        ("depreciation", POOL_H100, n_h * 30000.0 / 48 * months, "H100 cards, $30,000 over 48 months"),
        ("depreciation", POOL_MIG, n_m * 15000.0 / 48 * months, "A100 cards, $15,000 over 48 months"),
        ("chassis", POOL_H100, n_h_nodes * 90000.0 / 60 * months, "8-GPU servers, $90,000 over 60 months"),
        ("chassis", POOL_MIG, n_m_nodes * 45000.0 / 60 * months, "MIG servers"),
        ("facility", POOL_H100, n_h * 0.14 * hours, "colocation: rack space and power delivery"),
        ("facility", POOL_MIG, n_m * 0.07 * hours, "colocation"),
        ("cooling", None, n_all * 0.035 * hours, "liquid/air cooling contract"),
        ("network", POOL_H100, n_h * 0.06 * hours, "InfiniBand fabric"),
        ("network", None, n_all * 0.015 * hours, "data-centre uplinks"),
        ("storage", None, n_all * 0.045 * hours, "parallel file system and object storage"),
        ("software", None, n_all * 0.11 * hours, "NVIDIA AI Enterprise, Slurm support, observability"),
        ("operations", None, n_all * 0.30 * hours, "platform engineering labour"),
        ("support", POOL_H100, n_h * 0.05 * hours, "hardware support contract"),
        ("support", POOL_MIG, n_m * 0.03 * hours, "hardware support contract"),
    ]
    costs = [dict(cost_id=f"cost-{i + 1:03d}", category=cat, amount=round(amt, 2), currency="USD", start=ep(0),
                  end=ep(T), pool=pool) for i, (cat, pool, amt, _) in enumerate(c_rows)]
    # a direct cost: an annotation (preference data) purchase for rlhf, booked by finance on its project code
    costs.append(dict(cost_id="cost-direct-001", category="other", amount=260.0 * f.days, currency="USD", start=ep(0),
                      end=ep(T), owner="PRJ-1004", source="finance"))
    t["costs"] = _frame("costs", costs)
    t["rates"] = _frame("rates", [dict(pool=POOL_INFER, price_per_gpu_hour=1.60, category="gpu_rental",
                                       start=ep(0), end=ep(T))])
    # ---- tariffs: hourly time of use
    rng = f.rng(6)
    h = np.arange(f.H)
    hod = h % 24
    price = np.where((hod >= 22) | (hod < 6), 0.09, np.where((hod >= 8) & (hod < 20), 0.21, 0.14))
    wind = np.repeat(rng.normal(0, 25, f.days), 24)
    carbon = np.clip(330 - 60 * np.cos(2 * np.pi * (hod - 13) / 24) + wind + rng.normal(0, 8, f.H), 250, 450)
    t["tariffs"] = _frame("tariffs", [
        dict(start=ep(int(k) * HOUR), end=ep(int(k + 1) * HOUR), price_per_kwh=float(p), carbon_g_per_kwh=round(float(cb), 1))
        for k, p, cb in zip(h, price, carbon)
    ])
    t["queue"] = _frame("queue", [
        dict(job_id=q["job_id"], owner=q["owner"], pool=q["pool"], gpus=q["gpus"], submit=ep(q["submit"]),
             start=ep(q["start"]), reason=q["reason"]) for q in f.queue
    ])
    t["events"] = _frame("events", [
        dict(e, start=ep(e["start"]), end=ep(e["end"])) for e in f.events
    ])
    t["quotas"] = _frame("quotas", [
        dict(tenant="research", pool=POOL_H100, gpus=float(round(0.75 * n_h))),
        dict(tenant="research", pool=POOL_INFER, gpus=float(max(1, round(0.15 * n_i)))),
        dict(tenant="research", pool=POOL_MIG, gpus=float(max(1, round(0.6 * n_m)))),
        dict(tenant="product", pool=POOL_H100, gpus=float(max(1, round(0.25 * n_h)))),
        dict(tenant="product", pool=POOL_INFER, gpus=float(max(1, round(0.3 * n_i)))),
        dict(tenant="product", pool=POOL_MIG, gpus=float(max(1, round(0.4 * n_m)))),
        dict(tenant="platform", pool=POOL_INFER, gpus=float(n_i)),
    ])
    t["budgets"] = _frame("budgets", budget_rows(f))
    return t


def budget_rows(f: Fleet) -> list[dict]:
    """Budgets (an extension table, docs/budgets.md) scaled to the fleet: month budgets of research
    and rlhf, a quarter of product, an energy-only month of search-rerank and a two-week sprint of
    llm-pretrain on the narrow boundary. In the default bundle rlhf overruns (its direct cost alone,
    $260 a day, eats most of a $9,000 month), the sprint is at risk and the others are within."""
    per_day = f.gpus  # dollars per physical card and day, a scale for the amounts
    ep = lambda t: _epoch(f, t)  # noqa: E731
    return [
        dict(budget_id="bud-llm-pretrain-sprint", project="llm-pretrain", period_kind="custom",
             amount=round(8.0 * per_day * 14, 2), currency="USD", boundary="narrow", start=ep(0), end=ep(14 * DAY)),
        dict(budget_id="bud-product-quarter", tenant="product", period_kind="quarter",
             amount=round(12.0 * per_day * 92, 2), currency="USD"),
        dict(budget_id="bud-research-month", tenant="research", period_kind="month",
             amount=round(45.0 * per_day * 31, 2), currency="USD"),
        dict(budget_id="bud-rlhf-month", project="rlhf", period_kind="month", amount=9000.0, currency="USD"),
        dict(budget_id="bud-search-energy-month", project="search-rerank", period_kind="month",
             amount=round(0.12 * per_day * 31, 2), currency="USD", categories="power"),
    ]


# ----------------------------------------------------------------------------- telemetry


def traffic(t: np.ndarray, weekday0: int) -> np.ndarray:
    """Diurnal request traffic in [0, 1] at seconds t from a Monday-aligned UTC midnight."""
    hod = (t % DAY) / HOUR
    day = (weekday0 + t // DAY) % 7
    shape = 0.12 + 0.88 * (0.5 * (1 - np.cos(2 * np.pi * (hod - 2) / 24))) ** 1.6  # peak at 14:00 UTC
    return shape * np.where(day >= 5, 0.55, 1.0)


def _profile(job: Job, m: int, iv: int, traf: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """util and memory fraction for m samples of one allocation."""
    w = job.workload
    if w == "training":
        u = np.clip(rng.normal(93, 2.5, m), 80, 99.5)
        period = max(1, 7200 // iv)
        ck = (np.arange(m) % period) < max(1, 180 // iv)
        ck[: max(1, 600 // iv)] = False
        u[ck] = rng.uniform(15, 40, ck.sum())
        if job.s >= 0:  # start-up: loading weights and data
            warm = min(m, max(1, 600 // iv))
            u[:warm] = np.linspace(3, 60, warm)
        mem = np.full(m, rng.uniform(0.86, 0.97))
    elif w == "fine_tuning":
        u = np.clip(rng.normal(rng.uniform(70, 88), 7, m), 35, 99)
        period = max(1, 3600 // iv)
        ev = (np.arange(m) % period) >= period - max(1, 300 // iv)
        u[ev] = rng.uniform(25, 50, ev.sum())
        mem = np.full(m, rng.uniform(0.5, 0.9))
    elif w == "batch_inference":
        u = np.clip(rng.normal(rng.uniform(55, 80), 12, m), 15, 99)
        mem = np.full(m, rng.uniform(0.45, 0.85))
    elif w == "inference":
        load = MODEL_SPEC.get(job.model or "", {}).get("load", 0.7)
        u = np.clip(6 + 86 * load * traf + rng.normal(0, 4, m), 2, 99)
        mem = np.full(m, 0.90)  # vLLM pre-allocates its KV cache
    elif w == "interactive":
        burst = np.convolve(rng.random(m) < 0.025, np.ones(max(1, 720 // iv)), mode="same") > 0
        u = np.where(burst, rng.uniform(25, 90, m), rng.uniform(0, 3, m))
        mem = np.full(m, rng.uniform(0.1, 0.6))
    else:
        u = np.clip(rng.normal(55, 12, m), 5, 99)
        mem = np.full(m, rng.uniform(0.2, 0.6))
    return u, mem


def card_samples(fleet: Fleet, card: Card, iv: int, traf: np.ndarray) -> dict[str, np.ndarray]:
    """All samples of one card: k (sample index), util, power, energy, mem (gap rows removed)."""
    n = fleet.T // iv
    rng = fleet.rng(100, card.idx)
    util = np.zeros(n)
    shared = np.zeros(n)
    mem = np.zeros(n)
    held = np.zeros(n, dtype=bool)
    ctx = np.zeros(n, dtype=bool)  # allocated, CUDA context up, no work
    for job in fleet.by_card[card.idx]:
        i0 = min(n, max(0, _ceil_div(job.s, iv)))
        i1 = min(n, max(0, _ceil_div(job.e, iv)))
        if i1 <= i0:
            continue
        sl = slice(i0, i1)
        held[sl] = True
        if card.idx in job.inactive:
            ctx[sl] = True
            mem[sl] = np.maximum(mem[sl], 518.0)
            continue
        u, mf = _profile(job, i1 - i0, iv, traf[sl], rng)
        if job.share < 1.0:
            shared[sl] += u * job.share
            mem[sl] += mf * job.share * card.mem_mib
        else:
            util[sl] = np.maximum(util[sl], u)
            mem[sl] = np.maximum(mem[sl], mf * card.mem_mib)
    util = np.maximum(util, shared)
    reset_at = None
    drop = None
    for fx in fleet.fx_by_card[card.idx]:
        i0, i1 = min(n, _ceil_div(fx.s, iv)), min(n, _ceil_div(fx.e, iv))
        if fx.kind == "dip" and i1 > i0:
            util[i0:i1] = rng.uniform(0, 3.5, i1 - i0)
        elif fx.kind == "stalls" and i1 > i0:
            m = i1 - i0
            period = max(2, int(rng.uniform(30, 50) * 60 // iv))
            width = max(1, 180 // iv)
            st = (np.arange(m) % period) >= period - width
            st[: period] = False
            util[i0:i1][st] = rng.uniform(0, 4, st.sum())
        elif fx.kind == "reset":
            reset_at = i0
        elif fx.kind == "gap":
            drop = (i0, i1)
    idle = ~held
    util[idle] = rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], size=idle.sum())
    mem[idle] = 0.0
    mem[held & (mem < 1)] = 518.0
    util = np.round(np.clip(util, 0, 100), 1)
    mem = np.round(np.minimum(mem * rng.normal(1, 0.004, n), card.mem_mib))
    out = {"k": np.arange(n, dtype=np.int64), "util": util, "mem": mem}
    if card.kind == "mig":
        out["power"] = np.full(n, np.nan)
        out["energy"] = np.full(n, np.nan)
    else:
        span = card.p_max - card.p_idle
        power = card.p_idle + span * (util / 100) ** 1.15 + rng.normal(0, 4, n) + np.where(ctx, 14.0, 0.0)
        power = np.round(np.clip(power, 0.9 * card.p_idle, 1.02 * card.p_max), 1)
        e0 = float(rng.uniform(2e9, 6e10))
        energy = e0 + np.concatenate(([0.0], np.cumsum(power[:-1] * iv)))
        if reset_at is not None and reset_at < n:
            energy[reset_at:] -= energy[reset_at] - float(rng.uniform(40, 400))
        out["power"] = power
        out["energy"] = np.round(energy, 1)
    if drop is not None and drop[1] > drop[0]:
        keep = np.ones(n, dtype=bool)
        keep[drop[0]:drop[1]] = False
        out = {k: v[keep] for k, v in out.items()}
    return out


TELEMETRY_ARROW = pa.schema([
    ("ts", pa.timestamp("us", tz="UTC")),
    ("gpu_id", pa.string()),
    ("util_pct", pa.float64()),
    ("power_w", pa.float64()),
    ("energy_j", pa.float64()),
    ("mem_used_mib", pa.float64()),
])


class _Sink:
    """Writes record batches of one table to CSV or Parquet, batch by batch."""

    def __init__(self, path: Path, fmt: str, arrow_schema: pa.Schema, float_cols: tuple[str, ...] = ()):
        self.path, self.fmt, self.schema = path, fmt, arrow_schema
        self.rows = 0
        if fmt == "parquet":
            plain = [c for c in float_cols]
            self.w = pq.ParquetWriter(
                path, arrow_schema, compression="zstd", compression_level=9,
                use_dictionary=[n for n in arrow_schema.names if n not in plain],
                use_byte_stream_split=plain or False,
            )
        else:
            self.fh = open(path, "wb")
            self.first = True

    def write(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        if self.fmt == "parquet":
            self.w.write_table(table, row_group_size=1_048_576)
        else:
            df = pl.from_arrow(table)
            csv_guard.write_csv(df, self.fh, include_header=self.first, datetime_format=TS_FMT)
            self.first = False

    def close(self) -> None:
        if self.fmt == "parquet":
            self.w.close()
        else:
            if self.first:  # no rows: still write the header
                csv_guard.write_csv(pl.DataFrame(schema=pl.from_arrow(self.schema.empty_table()).schema), self.fh)
            self.fh.close()


def write_telemetry(fleet: Fleet, path: Path, fmt: str, iv: int, batch_rows: int = 2_000_000) -> int:
    n = fleet.T // iv
    p0_us = int(fleet.p0.timestamp()) * 1_000_000
    traf = traffic(np.arange(n, dtype=np.int64) * iv, fleet.p0.weekday())
    sink = _Sink(path, fmt, TELEMETRY_ARROW, float_cols=("power_w", "energy_j"))
    buf: list[tuple[str, dict]] = []
    size = 0

    def flush() -> None:
        nonlocal buf, size
        if not buf:
            return
        counts = np.array([len(d["k"]) for _, d in buf])
        ids = pa.array([g for g, _ in buf], type=pa.string()).take(pa.array(np.repeat(np.arange(len(buf)), counts)))
        cat = lambda key: np.concatenate([d[key] for _, d in buf])  # noqa: E731
        ts = pa.array(p0_us + cat("k") * (iv * 1_000_000), type=pa.timestamp("us", tz="UTC"))
        table = pa.Table.from_arrays(
            [ts, ids, pa.array(cat("util")), pa.array(cat("power"), from_pandas=True),
             pa.array(cat("energy"), from_pandas=True), pa.array(cat("mem"))],
            schema=TELEMETRY_ARROW,
        )
        sink.write(table)
        buf, size = [], 0

    for card in fleet.cards:
        d = card_samples(fleet, card, iv, traf)
        buf.append((card.gpu_id, d))
        size += len(d["k"])
        if size >= batch_rows:
            flush()
    flush()
    sink.close()
    return sink.rows


# ----------------------------------------------------------------------------- requests


REQUESTS_ARROW = pa.schema([
    ("request_id", pa.string()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("owner", pa.string()),
    ("source", pa.string()),
    ("model", pa.string()),
    ("input_tokens", pa.int64()),
    ("cached_input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("status", pa.string()),
    ("ttft_ms", pa.float64()),
    ("latency_ms", pa.float64()),
    ("prefill_ms", pa.float64()),
    ("decode_ms", pa.float64()),
    ("requests", pa.int64()),
    ("end", pa.timestamp("us", tz="UTC")),
    ("attempt", pa.int64()),
])


def _model_day(fleet: Fleet, mi: int, model: str, day: int, degraded: tuple[int, int]) -> dict[str, np.ndarray]:
    spec = MODEL_SPEC[model]
    rng = fleet.rng(200, mi, day)
    cards = len(fleet.model_cards[model]) + (0.5 if model == "mistral-7b" else 0.0)
    minutes = np.arange(1440, dtype=np.int64) * MIN + day * DAY
    traf = traffic(minutes + 30, fleet.p0.weekday())
    # normalise so that a card serves REQUESTS_PER_CARD_DAY on an average weekday
    norm = float(traffic(np.arange(1440) * MIN + 30, 0).mean())
    lam = REQUESTS_PER_CARD_DAY * cards / 1440 * traf / norm
    counts = rng.poisson(lam)
    n = int(counts.sum())
    t = np.repeat(minutes, counts) + rng.integers(0, 60, n)
    tr = np.repeat(traf, counts)
    keys = list(spec["mix"])
    owner_i = rng.choice(len(keys), size=n, p=list(spec["mix"].values()))
    med_in, p_hit, hit_frac, med_out = (np.array([KEY_TOKENS[k][i] for k in keys])[owner_i] for i in range(4))
    prompt = np.maximum(1, np.round(med_in * rng.lognormal(0, 0.7, n))).astype(np.int64)
    hit = rng.random(n) < p_hit
    cached = np.where(hit, np.round(prompt * hit_frac * rng.uniform(0.8, 1.0, n)), 0).astype(np.int64)
    cached = (cached // 16) * 16  # prefix caches work in blocks of 16 tokens
    uncached = prompt - cached
    out = np.clip(np.round(med_out * rng.lognormal(0, 0.6, n)), 1, 4096).astype(np.int64)
    # status
    err_p = np.where((t >= degraded[0]) & (t < degraded[1]) & (model == "llama-3.1-70b"), 0.15, 0.012)
    r = rng.random(n)
    status = np.full(n, "ok", dtype=object)
    status[r < err_p + 0.004 + 0.005] = "cancelled"
    status[r < err_p + 0.004] = "timeout"
    status[r < err_p] = "error"
    # timings
    queue_ms = rng.exponential(25 + 420 * tr ** 6, n)
    prefill = 12 + (uncached / spec["prefill_tps"] + cached / (spec["prefill_tps"] * 12)) * 1000 * rng.lognormal(0, 0.1, n)
    tpot = spec["tpot_ms"] * (1 + 0.3 * tr) * rng.lognormal(0, 0.15, n)
    decode = out * tpot
    is_err, is_to, is_cx = status == "error", status == "timeout", status == "cancelled"
    out = np.where(is_err, 0, out)
    decode = np.where(is_err, 0.0, decode)
    budget = np.maximum(0.0, 60000 - queue_ms - prefill)
    out = np.where(is_to, np.minimum(out, np.maximum(1, budget // tpot)).astype(np.int64) + 0, out)
    decode = np.where(is_to, budget, decode)
    frac = rng.uniform(0.1, 0.7, n)
    out = np.where(is_cx, np.maximum(1, np.round(out * frac)).astype(np.int64), out)
    decode = np.where(is_cx, decode * frac, decode)
    ttft = queue_ms + prefill
    latency = np.where(is_to, 60000.0, ttft + decode + rng.uniform(2, 15, n))
    ttft = np.where(is_err, np.nan, ttft)
    return dict(t=t, owner=np.array(keys, dtype=object)[owner_i], model=np.full(n, model, dtype=object),
                input_tokens=uncached, cached_input_tokens=cached, output_tokens=out.astype(np.int64),
                status=status, ttft_ms=np.round(ttft, 1), latency_ms=np.round(latency, 1),
                prefill_ms=np.round(prefill, 1), decode_ms=np.round(decode, 1))


def _batch_buckets(fleet: Fleet, mi: int, model: str, day: int) -> dict[str, np.ndarray]:
    """Hourly usage buckets of a model's batch traffic (no per-request latency or phase times)."""
    key, tps = BATCH_TRAFFIC[model]
    rng = fleet.rng(300, mi, day)
    cards = len(fleet.model_cards[model]) + (0.5 if model == "mistral-7b" else 0.0)
    hours = np.arange(24, dtype=np.int64) * 3600 + day * DAY
    # batch work fills the night: the inverse of the interactive curve
    traf = traffic(hours + 1800, fleet.p0.weekday())
    level = np.clip(1.6 - traf, 0.3, 1.5) * rng.lognormal(0, 0.08, 24)
    out = np.round(cards * tps * 3600 * level).astype(np.int64)
    med_in, p_hit, hit_frac, med_out = KEY_TOKENS[key]
    prompt = np.round(out * min(med_in / med_out, 4.0)).astype(np.int64)  # batch prompts are shorter
    cached = np.round(prompt * p_hit * hit_frac).astype(np.int64)
    n = len(hours)
    return dict(t=hours, owner=np.full(n, key, dtype=object), model=np.full(n, model, dtype=object),
                input_tokens=prompt - cached, cached_input_tokens=cached, output_tokens=out,
                requests=np.maximum(1, np.round(out / med_out)).astype(np.int64))


def _bucket_table(fleet: Fleet, day: int, p0: int) -> pa.Table:
    parts = [_batch_buckets(fleet, mi, m, day) for mi, m in enumerate(MODELS)]
    d = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    n = len(d["t"])
    ids = np.array([f"bkt-{m}-{day:03d}-{(t // 3600) % 24:02d}" for m, t in zip(d["model"], d["t"])], dtype=object)
    start = (p0 + d["t"]) * 1_000_000
    nulls = pa.nulls(n, type=pa.float64())
    return pa.Table.from_arrays([
        pa.array(ids, type=pa.string()),
        pa.array(start, type=pa.timestamp("us", tz="UTC")),
        pa.array(d["owner"], type=pa.string()),
        pa.array(np.full(n, "gateway", dtype=object), type=pa.string()),
        pa.array(d["model"], type=pa.string()),
        pa.array(d["input_tokens"]), pa.array(d["cached_input_tokens"]), pa.array(d["output_tokens"]),
        pa.array(np.full(n, "ok", dtype=object), type=pa.string()),
        nulls, nulls, nulls, nulls,
        pa.array(d["requests"]),
        pa.array(start + 3_600_000_000, type=pa.timestamp("us", tz="UTC")),
        pa.nulls(n, type=pa.int64()),
    ], schema=REQUESTS_ARROW)


def write_requests(fleet: Fleet, path: Path, fmt: str) -> int:
    sink = _Sink(path, fmt, REQUESTS_ARROW)
    degraded = (fleet._marks["g0"], fleet._marks["g1"])
    p0 = int(fleet.p0.timestamp())
    next_id = 1
    for day in range(fleet.days):
        parts = [_model_day(fleet, mi, m, day, degraded) for mi, m in enumerate(MODELS)]
        d = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        mi = np.concatenate([np.full(len(p["t"]), i) for i, p in enumerate(parts)])
        order = np.lexsort((np.arange(len(mi)), mi, d["t"]))
        d = {k: v[order] for k, v in d.items()}
        n = len(order)
        # A client retries a call that failed: the next request of the same key and model after
        # an error or timeout is its second attempt (derived, so no random draw changes).
        failed = pl.DataFrame({"owner": d["owner"], "model": d["model"], "status": d["status"]}).select(
            pl.col("status").is_in(["error", "timeout"]).shift(1).over("owner", "model").fill_null(False)
        )["status"].to_numpy()
        attempt = np.where(failed, 2, 1).astype(np.int64)
        ids = np.char.add("req-", np.char.zfill(np.arange(next_id, next_id + n).astype(str), 9))
        next_id += n
        table = pa.Table.from_arrays([
            pa.array(ids.astype(object), type=pa.string()),
            pa.array((p0 + d["t"]) * 1_000_000, type=pa.timestamp("us", tz="UTC")),
            pa.array(d["owner"], type=pa.string()),
            pa.array(np.full(n, "gateway", dtype=object), type=pa.string()),
            pa.array(d["model"], type=pa.string()),
            pa.array(d["input_tokens"]), pa.array(d["cached_input_tokens"]), pa.array(d["output_tokens"]),
            pa.array(d["status"], type=pa.string()),
            pa.array(d["ttft_ms"], from_pandas=True), pa.array(d["latency_ms"]),
            pa.array(d["prefill_ms"]), pa.array(d["decode_ms"]),
            pa.array(np.ones(n, dtype=np.int64)),
            pa.nulls(n, type=pa.timestamp("us", tz="UTC")),
            pa.array(attempt),
        ], schema=REQUESTS_ARROW)
        sink.write(table)
        sink.write(_bucket_table(fleet, day, p0))
    sink.close()
    return sink.rows


# ----------------------------------------------------------------------------- bundle


def _write_small(df: pl.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        df.write_parquet(path, compression="zstd")
    else:
        csv_guard.write_csv(df, path, datetime_format=TS_FMT)


def _config_toml(fleet: Fleet) -> str:
    return (
        "# Report config for this generated bundle (every key: docs/config.md).\n"
        "[period]\n"
        f"start = {fleet.iso(0)}\n"
        f"end = {fleet.iso(fleet.T)}\n"
        'timezone = "Europe/Berlin"\n'
        'currency = "USD"\n'
        "\n[boundary]\n"
        'name = "fully_loaded"\n'
        "\n[energy]\n"
        "server_overhead = 1.3\n"
        "pue = 1.2\n"
        "flat_price_per_kwh = 0.12\n"
    )


def generate_bundle(
    out_dir: str | Path,
    gpus: int = 24,
    days: int = 7,
    seed: int = 7,
    start: str = "2026-10-05",
    fmt: str = "csv",
    telemetry_interval_s: int = 60,
    telemetry_fmt: str | None = None,
    requests_fmt: str | None = None,
) -> Path:
    """Write a usage bundle for a synthetic fleet into out_dir and return its path.

    fmt is the format of every table; telemetry_fmt / requests_fmt override it for the
    two big tables (None: same as fmt).
    """
    for f in (fmt, telemetry_fmt, requests_fmt):
        if f not in (None, "csv", "parquet"):
            raise ValueError(f"format must be csv or parquet, got {f!r}")
    if telemetry_interval_s < 1 or DAY % telemetry_interval_s:
        raise ValueError("telemetry interval must be a positive divisor of 86400 seconds")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tel_fmt, req_fmt = telemetry_fmt or fmt, requests_fmt or fmt
    for name in TABLES:  # stale files of the other format would make the bundle ambiguous
        for ext in ("csv", "parquet", "jsonl"):
            p = out / f"{name}.{ext}"
            if p.exists():
                p.unlink()
    fleet = Fleet(gpus, days, seed, start)
    for name, df in small_tables(fleet).items():
        _write_small(df, out / f"{name}.{fmt}", fmt)
    n_tel = write_telemetry(fleet, out / f"telemetry.{tel_fmt}", tel_fmt, telemetry_interval_s)
    n_req = write_requests(fleet, out / f"requests.{req_fmt}", req_fmt)
    (out / "ailedger.toml").write_text(_config_toml(fleet), encoding="utf-8")
    manifest = fleet.anomalies(telemetry_interval_s)
    manifest["generator"] = dict(gpus=gpus, days=days, seed=seed, start=start, telemetry_interval_s=telemetry_interval_s)
    manifest["rows"] = {"telemetry": n_tel, "requests": n_req, "allocations": len(fleet.alloc_rows),
                        "gpu_ids": len(fleet.cards)}
    (out / "anomalies.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="bundle folder to write")
    ap.add_argument("--gpus", type=int, default=24, help="physical cards (>= 8)")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--start", default="2026-10-05", help="first day (UTC), YYYY-MM-DD")
    ap.add_argument("--format", dest="fmt", choices=("csv", "parquet"), default="csv")
    ap.add_argument("--telemetry-format", choices=("csv", "parquet"), default=None, help="default: --format")
    ap.add_argument("--requests-format", choices=("csv", "parquet"), default=None, help="default: --format")
    ap.add_argument("--telemetry-interval", type=int, default=60, help="seconds between samples")
    sp = ap.add_argument_group("--shape sparse (a big scheduler trace without telemetry: sample_data/sparse.py)")
    ap.add_argument("--shape", choices=("dense", "sparse"), default="dense",
                    help="dense: a busy fleet with telemetry and requests (default); sparse: thousands of cards, "
                         "scattered jobs, long queues, no telemetry")
    sp.add_argument("--allocations", type=int, default=30_000, help="allocation rows, about (sparse)")
    sp.add_argument("--waits", type=int, default=30_000, help="queue rows (sparse)")
    sp.add_argument("--events", type=int, default=5_000, help="events on cards, nodes and pools (sparse)")
    sp.add_argument("--cost-span-hours", type=float, default=24.0, help="span of each cost row (sparse)")
    sp.add_argument("--owners", type=int, default=200, help="distinct projects (sparse)")
    sp.add_argument("--requests", type=int, default=0, help="gateway requests (sparse)")
    ap.add_argument("--two-months", action="store_true",
                    help="two calendar months from --start's month (--days ignored) with changes planted in the "
                         "second (sample_data/planted.py), for `ailedger diff`")
    a = ap.parse_args(argv)
    try:
        if a.shape == "sparse":
            from sample_data.sparse import generate_sparse

            print(generate_sparse(a.out, gpus=a.gpus if a.gpus != 24 else 8192, days=a.days if a.days != 7 else 45,
                                  allocations=a.allocations, waits=a.waits, events=a.events,
                                  cost_span_hours=a.cost_span_hours, owners=a.owners, requests=a.requests,
                                  seed=a.seed, start=a.start if a.start != "2026-10-05" else "2026-09-01"))
            return 0
        if a.two_months:
            from sample_data.planted import generate_two_months

            print(generate_two_months(a.out, gpus=a.gpus, seed=a.seed, start=a.start, fmt=a.fmt,
                                      telemetry_interval_s=a.telemetry_interval, telemetry_fmt=a.telemetry_format,
                                      requests_fmt=a.requests_format))
            return 0
        path = generate_bundle(a.out, gpus=a.gpus, days=a.days, seed=a.seed, start=a.start, fmt=a.fmt,
                               telemetry_interval_s=a.telemetry_interval, telemetry_fmt=a.telemetry_format,
                               requests_fmt=a.requests_format)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
