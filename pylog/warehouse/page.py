"""The status report as one self-contained HTML page (no script, nothing fetched).

Top to bottom: when it was generated and whether the brokers answered; pending and
failed runs with the command that finishes each; the findings behind the exit status;
totals; per table and partition the lag in offsets and in seconds, lagging partitions
highlighted (``tr.lagging``); each table's newest runs; and per table two inline SVG
charts (:mod:`pylog.warehouse.svg`): the backlog each run found (the lag when it was
planned, offsets) and the records each run loaded. Text columns are left-aligned,
numbers right-aligned (``td.num``). With ``refresh_seconds`` the page reloads itself.
"""

from __future__ import annotations

from html import escape
from typing import Any, Sequence

from pylog.warehouse.render import utc_ms
from pylog.warehouse.report import StatusReport, backlog, check, is_lagging
from pylog.warehouse.svg import bar_chart, line_chart

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{margin:0 0 .2em}h2{margin:1.4em 0 .4em;font-size:1.15em}
.meta{color:#555}.unreachable{color:#b00;font-weight:bold}
table{border-collapse:collapse;margin:.3em 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
td.wrap{white-space:normal;min-width:12em;max-width:30em;overflow-wrap:anywhere}
th{background:#f3f3f3}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.lagging td{background:#ffe2c4}tr.failed td{background:#ffd0d0}tr.pending td{background:#fff6c4}
tr.running td{background:#e6f2ff}tr.mismatch td{background:#ffd0d0}
.problems li{color:#b00}code{background:#f3f3f3;padding:1px 4px}
.charts{display:flex;flex-wrap:wrap;gap:1em}
.chart .axis{stroke:#888}.chart .tick{font-size:10px;fill:#555}.chart .chart-title{font-size:11px;fill:#222}
.chart .bar{fill:#4a7bd0}.chart .line{stroke:#d0664a;stroke-width:2}.chart .point{fill:#d0664a}
"""


def status_html(report: StatusReport, refresh_seconds: int | None = None) -> str:
    """The whole page."""
    now = report.generated_at_ms
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">' if refresh_seconds else ""
    broker = ('<span class="unreachable" id="broker">broker unreachable: lag unknown</span>'
              if not report.broker_reachable else '<span id="broker">brokers answered</span>')
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>{refresh}<title>pylog status</title>"
             f"<style>{_STYLE}</style></head><body>",
             "<h1>pylog status</h1>",
             f'<p class="meta">generated at <time id="generated-at">{utc_ms(now)}</time> &middot; {broker} '
             f'&middot; exit status <b id="exit-code">{report.exit_code}</b></p>']
    if report.pending:
        parts.append("<h2>Pending and failed runs</h2>")
        parts.append(_table(
            ["table", "run", "kind", "state", "planned at", "age (s)", "tasks done", "error", "finish with"],
            [([r.table, r.run_id, r.kind, r.state, utc_ms(r.planned_at_ms), round(r.age_seconds(now)),
               f"{r.tasks_done}/{r.tasks_total}", _Wrap(r.error or ""), _Code(r.command)], r.state)
             for r in report.pending], table_id="pending-runs"))
    if report.problems:
        parts.append('<ul class="problems" id="problems">'
                     + "".join(f"<li>{escape(p.message)}</li>" for p in report.problems) + "</ul>")
    parts.append(_totals(report))
    parts.append("<h2>Partitions</h2>")
    rows = []
    for table in report.tables:
        for p in table.partitions:
            seconds = p.lag_seconds(now)
            lagging = is_lagging(report, p.lag, seconds)
            note = "broker unreachable" if table.broker_error else "lagging" if lagging else ""
            rows.append(([table.table, p.topic, p.partition, p.earliest_offset, p.latest_offset,
                          p.committed_offset, p.lag, None if seconds is None else round(seconds), note],
                         "lagging" if lagging else ""))
    parts.append(_table(["table", "topic", "partition", "log start", "latest", "committed", "lag",
                         "lag (s)", "note"], rows, table_id="partitions"))
    parts.append("<h2>Last runs</h2>")
    run_rows = [([table, a.run_id, a.kind, utc_ms(a.committed_at_ms), a.records_fetched, a.rows_written,
                  a.quarantined, backlog(a), round(a.seconds, 1), check(a)],
                 "mismatch" if check(a) != "ok" else "")
                for table, audits in report.recent_runs.items() for a in reversed(audits)]
    parts.append(_table(["table", "run", "kind", "committed at", "fetched", "written", "quarantined",
                         "backlog", "seconds", "check"], run_rows, table_id="runs"))
    lag_now = {t.table: t.lag for t in report.tables}
    for table, audits in report.recent_runs.items():
        if not audits:
            continue
        labels = [utc_ms(a.committed_at_ms)[5:16].replace("T", " ") for a in audits]
        lags, lag_labels = [backlog(a) for a in audits], list(labels)
        if lag_now.get(table) is not None:  # and where it stands now
            lags.append(lag_now[table])
            lag_labels.append("now")
        parts.append(f"<h2>{escape(table)}</h2><div class='charts'>"
                     + line_chart("lag at each run, and now (offsets)",
                                  lags, lag_labels)
                     + bar_chart("records loaded per run", [a.rows_written for a in audits], labels)
                     + "</div>")
    parts.append("</body></html>\n")
    return "".join(parts)


class _Wrap(str):
    """A long text cell, wrapped."""


class _Code(_Wrap):
    """A cell shown as code (wrapped)."""


def _totals(report: StatusReport) -> str:
    now = report.generated_at_ms
    partitions = [p for t in report.tables for p in t.partitions]
    lags = [p.lag for p in partitions]
    seconds = [s for p in partitions if (s := p.lag_seconds(now)) is not None]
    lagging = sum(1 for p in partitions if is_lagging(report, p.lag, p.lag_seconds(now)))
    total_lag = None if any(lag is None for lag in lags) else sum(lags)
    return _table(["tables", "partitions", "lagging partitions", "total lag", "oldest unloaded (s)",
                   "pending runs"],
                  [([len(report.tables), len(partitions), lagging, total_lag,
                     round(max(seconds)) if seconds else None, len(report.pending)], "")],
                  table_id="totals")


def _table(headers: Sequence[str], rows: Sequence[tuple[Sequence[Any], str]], table_id: str) -> str:
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row, _ in rows) and bool(rows)
               for i in range(len(headers))]
    head = "".join(f'<th class="{"num" if numeric[i] else "text"}">{escape(h)}</th>'
                   for i, h in enumerate(headers))
    body = []
    for row, css in rows:
        cells = "".join(_cell(value, numeric[i]) for i, value in enumerate(row))
        body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _cell(value: Any, numeric: bool) -> str:
    text = "-" if value is None else f"<code>{escape(value)}</code>" if isinstance(value, _Code) else escape(str(value))
    if numeric:
        return f'<td class="num">{text}</td>'
    return f'<td class="text wrap">{text}</td>' if isinstance(value, _Wrap) else f'<td class="text">{text}</td>'
