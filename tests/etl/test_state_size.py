"""State that stays small: the commit reads a bounded number of state files whatever the
history, retention removes committed runs' state (never a pending run's), and ``pylog
status`` / ``pylog tables`` read the audit index, not every entry."""

from __future__ import annotations

import json
from pathlib import Path

from pylog.cli.main import main
from pylog.etl import job
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.model import AuditEntry, PartitionAudit, TablePlan, TaskDoneMarker, TaskRange
from pylog.etl.state import RECENT_AUDITS, StateStore, run_dir_name
from pylog.warehouse.status import collect_history, collect_status, format_history
from tests.etl.helpers import CountingStorage, events, write_config
from tests.etl.test_state import Clock

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def _entry(table: str, run_id: str, at_ms: int, kind: str = "scheduled") -> AuditEntry:
    r = TaskRange(table, 0, 0, 10)
    return AuditEntry(run_id, kind, table, table, at_ms, 10, 10, 0, 1000, 900, 1.0, 0.5, (r,),
                      (PartitionAudit(table, 0, 0, 10, 10, 10, 0),), ())


_TEMPLATE_RUN, _TEMPLATE_MS = "template-run-id", 9_876_543_210_123


def generate_history(state_dir: Path, table: str, count: int, end_ms: int, step_ms: int) -> list[str]:
    """The state ``count`` committed hourly runs leave (written directly, as fast as possible);
    the last entry goes through the store so the audit index exists. Returns the run ids."""
    tables = state_dir / "tables" / table
    (tables / "audit").mkdir(parents=True, exist_ok=True)
    runs = [f"hourly-{i:06d}" for i in range(count)]
    # Every entry is one serialised template with its run id and time put in (thousands
    # of entries through dataclasses.asdict and json.dumps take seconds).
    template = _entry(table, _TEMPLATE_RUN, _TEMPLATE_MS).to_json()
    assert template.count(_TEMPLATE_RUN.encode()) == 1 and template.count(b"%d" % _TEMPLATE_MS) == 1
    done = json.dumps({"markers": []})
    for i, run_id in enumerate(runs):
        at_ms = end_ms - (count - 1 - i) * step_ms
        if run_id != runs[-1]:
            entry = template.replace(_TEMPLATE_RUN.encode(), run_id.encode()).replace(
                b"%d" % _TEMPLATE_MS, b"%d" % at_ms)
            (tables / "audit" / f"{at_ms:013d}-{run_id}.json").write_bytes(entry)
        run_dir = tables / "runs" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "plan.json").write_text("{}")
        (run_dir / "done.json").write_text(done)
        (run_dir / "committed.json").write_text(json.dumps({"run_id": run_id, "at_ms": at_ms}))
    StateStore(state_dir.as_uri(), clock=lambda: end_ms / 1000).write_audit(_entry(table, runs[-1], end_ms))
    return runs


def test_index_answers_latest_and_retention_keeps_what_a_pending_run_needs(tmp_path):
    now_ms = 400 * DAY_MS
    runs = generate_history(tmp_path, "tbl", 24 * 60, now_ms, HOUR_MS)  # 60 days
    clock = Clock(now_ms / 1000)
    state = StateStore(tmp_path.as_uri(), clock=clock)
    assert state.latest_audit("tbl").run_id == runs[-1]
    assert [a.run_id for a in state.recent_audits("tbl")] == runs[-RECENT_AUDITS:]
    assert state.latest_audit("tbl", kind="backfill") is None  # not in the index: the full history says none
    assert len(state.list_audits("tbl")) == len(runs)
    # A run planned 45 days ago that never committed, and the pending run.
    old = TablePlan("old-failed", "backfill", "tbl", "tbl", now_ms - 45 * DAY_MS, (), {}, {})
    state.write_plan(old)
    pending = TablePlan("pending-1", "scheduled", "tbl", "tbl", now_ms, (), {}, {})
    state.write_plan(pending)
    state.write_marker("tbl", "pending-1", TaskDoneMarker(TaskRange("tbl", 0, 0, 5), 5, 5, 5, 0, 1, 1, (), (), 0.1))

    removed = state.prune("tbl", 30 * DAY_MS)

    assert removed == 24 * 30 - 1  # the runs committed more than 30 days ago (the horizon's run stays)
    kept = [a.run_id for a in state.list_audits("tbl")]
    assert kept == runs[-(24 * 30 + 1):]
    run_dirs = sorted(p.name for p in (tmp_path / "tables" / "tbl" / "runs").iterdir())
    assert run_dirs == sorted(kept + ["old-failed", "pending-1"])
    assert state.read_plan("tbl", "pending-1") == pending and state.count_markers("tbl", "pending-1") == 1
    assert state.read_plan("tbl", "old-failed") == old
    assert state.latest_audit("tbl").run_id == runs[-1]
    assert state.audit_for_run("tbl", runs[0]) is None and state.audit_for_run("tbl", runs[-2]).run_id == runs[-2]


def test_folded_markers_read_back(tmp_path):
    state = StateStore(tmp_path.as_uri())
    ranges = [TaskRange("t", p, 0, 10) for p in range(3)]
    markers = [TaskDoneMarker(r, 10, 10, 9, 1, 100, 90, (f"f{r.partition}",), (), 0.2) for r in ranges]
    for marker in markers:
        state.write_marker("tbl", "r1", marker)
    state.fold_markers("tbl", "r1", markers)
    assert sorted(p.name for p in (tmp_path / "tables" / "tbl" / "runs" / "r1").iterdir()) == ["done.json"]
    assert [state.read_marker("tbl", "r1", r) for r in ranges] == markers
    assert state.count_markers("tbl", "r1") == 3


def test_a_year_of_hourly_runs_then_a_load_reads_a_bounded_number_of_state_files(
        mock_cluster, tmp_path, monkeypatch):
    config = write_config(tmp_path, mock_cluster.bootstrap, topic="ev")
    state_dir = tmp_path / "state"
    now_ms = StateStore(config.state).now_ms()
    runs = generate_history(state_dir, "ev", 24 * 365, now_ms - 60_000, HOUR_MS)
    mock_cluster.produce("ev", events(0, 40))
    counter = CountingStorage().install(monkeypatch)
    commit_reads: list[str] = []

    def counted_commit(*args, **kwargs):
        start = len(counter.reads)
        try:
            return real_commit(*args, **kwargs)
        finally:
            commit_reads.extend(counter.reads[start:])

    real_commit = job.commit
    monkeypatch.setattr(job, "commit", counted_commit)
    [audit] = run_load(config, None, LoadRequest(run_id="now-1"))

    assert audit.rows_written == 40
    state_reads = counter.under(state_dir)
    # The commit: offsets, the publish journal, the audit index, the pending run, and the
    # lock before each write.
    names = {str(Path(p).relative_to(state_dir / "tables" / "ev")) for p in commit_reads}
    assert {n.split("/")[0] for n in names} <= {"lock.json", "offsets.json", "runs", "audit-index", "pending"}
    assert len(names) <= 8 and len(commit_reads) <= 16, "\n".join(commit_reads)
    assert len(state_reads) <= 60, state_reads  # a few per range and per commit step, none per earlier run
    earlier = [p for p in state_reads if "/audit/" in p or any(f"/runs/{r}/" in p for r in runs)]
    assert earlier == []
    # Retention (30 days) removed the older runs' plans, markers and audit entries.
    state = StateStore(config.state)
    kept = [a.run_id for a in state.list_audits("ev")]
    assert kept[-1] == "now-1" and 24 * 30 - 2 <= len(kept) - 1 <= 24 * 30 + 1
    assert kept[:-1] == runs[-(len(kept) - 1):]
    run_dirs = {p.name for p in (state_dir / "tables" / "ev" / "runs").iterdir()}
    assert run_dirs == set(kept)
    assert sorted(p.name for p in (state_dir / "tables" / "ev" / "runs" / "now-1").iterdir()) == [
        "committed.json", "done.json", "plan.json", "publish.json"]


def test_status_and_tables_read_the_index_after_10000_runs(mock_cluster, tmp_path, monkeypatch, capsys):
    config = write_config(tmp_path, mock_cluster.bootstrap, topic="ev")
    state_dir = tmp_path / "state"
    runs = generate_history(state_dir, "ev", 10_000, StateStore(config.state).now_ms() - 60_000, 60_000)
    mock_cluster.produce("ev", events(0, 8))
    run_load(config, None, LoadRequest(run_id="last"))
    counter = CountingStorage().install(monkeypatch)

    [status] = collect_status(config)
    assert status.last_audit.run_id == "last"
    assert len(counter.under(state_dir)) <= 3, counter.under(state_dir)

    counter.reads.clear()
    assert main(["tables", "--config", config.path]) == 0
    assert "last" in capsys.readouterr().out
    assert len(counter.under(state_dir)) <= 3, counter.under(state_dir)

    history = collect_history(config)  # only when asked: one file per run
    assert [a.run_id for a in history["ev"]] == runs + ["last"]
    text = format_history(history)
    assert len(text.splitlines()) == 2 + len(runs) + 1 and run_dir_name(runs[0]) in text
