"""The report folded a worker at a time (collector/report/tally.py): a fleet's report lists a
few GPUs per job and DAG, and every figure it gives is the one the whole lists would give."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from dask_metrics.collector.attribution.usage import IDLE_PERCENT, Usage
from dask_metrics.collector.model.series import WorkerInfo
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.report import where
from dask_metrics.collector.report.advice import load_models
from dask_metrics.collector.report.figures import device_key, peak_entry, use_entry
from dask_metrics.collector.report.layout import MAX_ROWS, sections
from dask_metrics.collector.report.listed import Listed
from dask_metrics.collector.report.model import build
from dask_metrics.collector.report.tally import Tally, WorkerFacts
from tests.test_report import session_of

GIB = 2**30
CAPACITY = 80 * GIB
JOBS = {"0": ["0", "1"], "1": ["0"], "2": ["0", "1", "2"]}


def usage(rng: random.Random) -> Usage:
    seconds = rng.uniform(10, 100)
    idle = rng.random() < 0.3
    busy = seconds * (rng.uniform(0, 0.04) if idle else rng.uniform(0.1, 1))
    measured = rng.choice([0, 1, 3])
    pool = rng.choice([None, None, 8 * GIB])
    return Usage(seconds=seconds, busy=busy, idle=seconds if idle else 0.0,
                 energy=rng.uniform(100, 1000) if measured else 0.0, energy_intervals=measured,
                 first=rng.randrange(0, 10_000), last=rng.randrange(10_000, 20_000),
                 rmm_used=rng.choice([None, 0.0, float(rng.randrange(GIB, 6 * GIB))])
                 if pool else None, rmm_pool=pool, resets=int(rng.random() < 0.05))


def fleet(seed: int, workers: int = 30, gpus: int = 4) -> list[WorkerFacts]:
    """Workers of ``gpus`` GPUs each, pairs of them seeing the same devices (w-0 and w-1 the
    first GPU of w-0, ...), running random DAGs of JOBS; peaks with ties."""
    rng = random.Random(seed)
    out = []
    for w in range(workers):
        name = f"w-{w}"
        devices = [(str(g), f"GPU-{w // 2}-{g}" if g == 0 else f"GPU-{w}-{g}")
                   for g in range(gpus)]
        found: dict[tuple[str, str, str, str], Usage] = {}
        job_peaks, dag_peaks = [], []
        for job, dags in JOBS.items():
            ran = [d for d in dags if rng.random() < 0.7]
            for gpu, uuid in devices:
                best = None
                for dag in ran:
                    found[(job, dag, gpu, uuid)] = usage(rng)
                    peak = Peak(name, gpu, uuid, float(rng.choice([10, 20, 40, 60, 75]) * GIB),
                                CAPACITY, rng.randrange(0, 20_000), f"{job}/{dag}", dag,
                                upper_bytes=rng.choice([None, None, 77.0 * GIB]))
                    dag_peaks.append(peak)
                    if best is None or peak.peak_bytes > best.peak_bytes:
                        best = peak
                if best is not None:
                    job_peaks.append(Peak(best.worker, gpu, uuid, best.peak_bytes, CAPACITY,
                                          best.time, job, best.dag, upper_bytes=best.upper_bytes))
        for gpu, uuid in devices:
            found[("", "", gpu, uuid)] = usage(rng)
        gpu_peaks = [Peak(name, gpu, uuid, float(rng.choice([30, 73, 74, 76]) * GIB), CAPACITY,
                          rng.randrange(0, 20_000), "", "") for gpu, uuid in devices]
        metered = frozenset(d for d in devices if rng.random() < 0.8)
        out.append(WorkerFacts(WorkerInfo(name, gpus=devices), found, job_peaks, dag_peaks,
                               gpu_peaks, metered))
    return out


def report(facts: Sequence[WorkerFacts], most: int) -> dict[str, Any]:
    return build(session_of(100.0), Tally.of(facts, most), {}, None, load_models(), 1.2)


def whole_lists(facts: Sequence[WorkerFacts]) -> dict[str, dict[str, Any]]:
    """Each job's full per-GPU lists and figures, from every worker's facts at once."""
    tracked = frozenset(f.info.name for f in facts
                        if any(u.rmm_used for u in f.usage.values()))
    metered = frozenset((f.info.name, *g) for f in facts for g in f.metered)
    out: dict[str, dict[str, Any]] = {}
    for job in JOBS:
        merged: dict[tuple[str, str, str], Usage] = {}
        for f in facts:
            for (j, _, gpu, uuid), u in f.usage.items():
                if j == job:
                    merged.setdefault((f.info.name, gpu, uuid), Usage()).add(u)
        devices: dict[str, dict[tuple[str, str, str], Usage]] = {}
        for key, one in merged.items():  # a GPU that several workers see is one entry
            devices.setdefault(device_key(*key), {})[key] = one
        per_gpu = [{"worker": w, "gpu": g, "uuid": u, **use_entry(views, metered, tracked)}
                   for views in devices.values() for w, g, u in [min(views)]]
        peaks = [peak_entry(p) for f in facts for p in f.job_peaks if p.job == job]
        out[job] = {"use": use_entry(merged, metered, tracked), "per_gpu": per_gpu,
                    "peaks": peaks, "dags": {d: [peak_entry(p) for f in facts
                                                 for p in f.dag_peaks
                                                 if p.job == f"{job}/{d}"]
                                             for d in JOBS[job]}}
    return out


def top(entries: list[dict[str, Any]], most: int, rank: Any) -> list[dict[str, Any]]:
    """The ``most`` best by ``rank`` (the earlier on a tie), in their order."""
    order = sorted(range(len(entries)), key=lambda i: (rank(entries[i]), -i), reverse=True)
    return [entries[i] for i in sorted(order[:most])]


def by_bytes(p: dict[str, Any]) -> float:
    return p["peak_bytes"]


def idlest(g: dict[str, Any]) -> float:
    mean = g["mean_utilization_percent"]
    return -mean if mean is not None else -float("inf")


USE_KEYS = ("gpus_used", "gpu_seconds", "busy_seconds", "mean_utilization_percent",
            "idle_gpu_seconds", "energy_joules", "energy_note", "peak_rmm_used_bytes",
            "rmm_pool_bytes", "rmm_note", "shared_gpus", "seen_first", "seen_last",
            "mean_sm_active_percent")


@pytest.mark.parametrize("seed", range(6))
def test_a_folded_job_lists_its_top_gpus_and_every_figure_of_all(seed: int) -> None:
    facts = fleet(seed)
    full, few = report(facts, 10_000), report(facts, 4)
    truth = whole_lists(facts)
    assert few["rules"]["gpus_listed"] == 4
    for a, b in zip(full["jobs"], few["jobs"], strict=True):
        want = truth[a["job"]]
        # unfolded, the lists are every GPU's; folded, the top 4 of them, and it says so
        assert sorted(map(repr, a["per_gpu"])) == sorted(map(repr, want["per_gpu"]))
        assert a["peaks"] == want["peaks"]
        assert b["peaks"] == top(want["peaks"], 4, by_bytes)
        assert b["peaks_omitted"] == len(want["peaks"]) - 4
        assert sorted(map(idlest, b["per_gpu"]), reverse=True) == sorted(
            map(idlest, want["per_gpu"]), reverse=True)[:4]  # the idlest, in worker order
        assert b["per_gpu_omitted"] == len(want["per_gpu"]) - 4
        assert a["idle_gpus"] == b["idle_gpus"] == sum(
            1 for g in want["per_gpu"] if g["gpu_seconds"] and g["mean_utilization_percent"]
            is not None and g["mean_utilization_percent"] < IDLE_PERCENT)
        # every figure the same, and the same as use_entry of all the job's GPUs at once
        for key in (*USE_KEYS, "peak", "peak_held_bytes", "wall_seconds"):
            assert a[key] == b[key], key
        for key in USE_KEYS:
            assert b[key] == pytest.approx(want["use"][key]) if isinstance(b[key], float) \
                else b[key] == want["use"][key], key
        assert b["peak"] == max(want["peaks"], key=by_bytes)  # the first of the highest
        assert b["shared_gpus"]  # the pairs' first GPUs: counted once
        for da, db in zip(a["dags"], b["dags"], strict=True):
            assert da["peaks"] == want["dags"][da["dag"]]
            assert db["peaks"] == top(da["peaks"], 4, by_bytes)
            assert db["peaks_omitted"] == len(da["peaks"]) - len(db["peaks"])
            assert {k: v for k, v in da.items() if k not in ("peaks", "peaks_omitted")} == \
                {k: v for k, v in db.items() if k not in ("peaks", "peaks_omitted")}
    for key in ("usage", "peak", "gpu_count", "shared_gpus", "rmm", "workers"):
        assert full["session"][key] == few["session"][key], key


def test_held_bytes_of_a_job_are_those_of_its_gpus_whether_listed_or_not() -> None:
    """peak_held_bytes: per GPU, RMM in use plus what NVML saw outside the pool at the GPU's
    peak; the largest over every GPU of the job, listed or not."""
    facts = fleet(7)
    tracked = {f.info.name for f in facts if any(u.rmm_used for u in f.usage.values())}
    for job in report(facts, 2)["jobs"]:
        held, known = [], False
        for f in facts:
            for p in f.job_peaks:
                if p.job != job["job"]:
                    continue
                mine = Usage()
                for (j, _, gpu, uuid), u in f.usage.items():
                    if (j, gpu, uuid) == (job["job"], p.gpu, p.uuid):
                        mine.add(u)
                if mine.rmm_pool and (mine.rmm_used or f.info.name in tracked):
                    known = True
                    held.append((mine.rmm_used or 0) + max(0.0, p.peak_bytes - mine.rmm_pool))
                else:
                    held.append(p.peak_bytes)
        assert job["peak_held_bytes"] == (max(held) if known else None)


def test_an_inventory_told_first_counts_shared_gpus_as_facts_seen_all_at_once_do() -> None:
    """The Gatherer's tally is told the export's inventory before any worker (``expect``):
    the report is the same as that of every worker's facts at once."""
    facts = fleet(3)
    streamed = Tally(Tally.of(facts).shared)
    for f in facts:
        streamed.add(f)
    once = build(session_of(100.0), Tally.of(facts), {}, None, load_models(), 1.2)
    assert build(session_of(100.0), streamed, {}, None, load_models(), 1.2) == once
    assert once["session"]["gpu_count"] == len({device_key(f.info.name, *g) for f in facts
                                                 for g in f.info.gpus})


def test_advice_on_a_fleet_names_a_few_gpus_and_counts_the_rest() -> None:
    """GPUs near capacity and GPUs idle through a job: the listed ones by name, then one line
    with how many more."""
    facts = fleet(11)
    found = report(facts, 3)
    near = [r for r in found["recommendations"] if r["kind"] == "near-capacity"]
    first: dict[str, Peak] = {}  # a GPU that two workers see: the first one's view
    for p in (p for f in facts for p in f.gpu_peaks):
        first.setdefault(device_key(p.worker, p.gpu, p.uuid), p)
    close = [p for p in first.values() if p.peak_percent >= 90]
    assert len(near) == 4 and "more GPU(s) came within 10 %" in near[-1]["text"]
    assert near[-1]["based_on"]["gpus_near_capacity"] == len(close)
    assert near[-1]["text"].startswith(f"{len(close) - 3} more")
    for job in found["jobs"]:
        idle = [r for r in found["recommendations"]
                if r["kind"] == "idle-gpu" and r.get("job") == job["job"]]
        named = [r for r in idle if "worker" in r]
        assert len(named) == min(3, job["idle_gpus"])
        if job["idle_gpus"] > 3:
            assert idle[-1]["text"].startswith(f"{job['idle_gpus'] - 3} more GPU(s) sat idle")


def test_listed_keeps_the_best_in_the_order_offered_the_earlier_on_a_tie() -> None:
    rng = random.Random(5)
    ranks = [rng.choice([1, 2, 3, 4]) for _ in range(200)]
    kept: Listed[int] = Listed(7)
    for i, r in enumerate(ranks):
        kept.offer((r,), i)
    assert list(kept) == [i for i in sorted(sorted(range(200), key=lambda i: -ranks[i])[:7])]
    assert kept.omitted == 193


def test_where_the_time_went_keeps_the_largest_rows_and_says_how_many_there_were() -> None:
    rows = [{"job": "0", "prefix": f"p{i}", "activity": "executor", "unit": u,
             "value": str(v)} for i, (u, v) in enumerate(
                 [("seconds", 5), ("bytes", 10**9), ("seconds", 0), ("seconds", 7.5),
                  ("seconds", 3)] * 30)]
    kept, count = where.largest(rows, "activities", most=70)
    assert count == 150 and len(kept) == 70
    assert [r["value"] for r in kept].count("7.5") == 30  # seconds first, largest first
    assert [r["value"] for r in kept].count("5") == 30 and {r["unit"] for r in kept} == \
        {"seconds"} and [r["value"] for r in kept].count("3") == 10
    assert kept == [r for r in rows if r in kept]  # in the file's order
    more, _ = where.largest(rows, "activities", most=130)  # every row in seconds, then bytes
    assert [r["unit"] for r in more].count("bytes") == 10
    body = report(fleet(1, workers=8), 16)
    body["where_the_time_went"] = {"activities": kept, "gpu_by_prefix": None,
                                   "rows_in_export": {"activities": count}}
    notes = [n for s in sections(body) for n in s.notes]
    assert any(n.startswith("Job 0: the 16 highest of ") and "GPUs' peaks" in n for n in notes)
    assert f"The {MAX_ROWS} largest of 150 rows; report.json keeps the 70 largest " \
        "('collector export' writes them all)." in notes


def test_a_gatherer_not_told_the_workers_refuses_rather_than_count_a_shared_gpu_twice() -> None:
    from dask_metrics.collector.model.series import Timeline
    from dask_metrics.collector.model.tables import WorkerTable
    from dask_metrics.collector.report.gatherer import Gatherer

    gather = Gatherer(["compute-util", "energy", "busy-seconds"], 30_000, 0, 60_000, 60_000)
    with pytest.raises(RuntimeError, match="expect"):
        gather(WorkerInfo("w-0"), {}, Timeline([], []), WorkerTable([], [], [], []))
    gather.expect([WorkerInfo("w-0", gpus=[("0", "GPU-s")]), WorkerInfo("w-1",
                                                                         gpus=[("0", "GPU-s")])])
    assert gather.tally is not None and gather.tally.shared == {"GPU-s"}
    gather(WorkerInfo("w-0"), {}, Timeline([], []), WorkerTable([], [], [], []))
    assert [info.name for info, _ in gather.tally.workers] == ["w-0"]


def test_a_gpu_two_workers_see_is_one_idle_gpu_of_the_job() -> None:
    """Two workers pinned to one device, idle through a job: the job used 1 GPU, 1 sat
    idle, and the advice names it once, with both workers."""
    def facts(name: str) -> WorkerFacts:
        idle = Usage(seconds=60.0, busy=0.6, idle=60.0, first=0, last=60_000)
        return WorkerFacts(WorkerInfo(name, gpus=[("0", "GPU-x")]),
                           {("0", "0", "0", "GPU-x"): idle, ("", "", "0", "GPU-x"): Usage()},
                           [], [], [], frozenset())

    body = report([facts("w-a"), facts("w-b")], 16)
    (job,) = body["jobs"]
    assert (job["gpus_used"], job["idle_gpus"], len(job["per_gpu"])) == (1, 1, 1)
    assert job["per_gpu"][0]["shared_gpus"] == [{"uuid": "GPU-x", "workers": ["w-a", "w-b"]}]
    idle = [r for r in body["recommendations"] if r["kind"] == "idle-gpu"]
    assert [r["text"][:51] for r in idle] == [
        "GPU 0 of w-a (also seen by w-b) sat idle through jo"]
