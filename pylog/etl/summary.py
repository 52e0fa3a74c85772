"""The summary table printed at the end of a run: one line per table partition."""

from __future__ import annotations

from pylog.etl.model import AuditEntry

_HEADER = ("table", "kind", "partition", "offsets", "fetched", "written", "quarantined")


def format_summary(audits: list[AuditEntry]) -> str:
    """A plain-text table of what each audit entry loaded, with a totals line per table."""
    lines = [_HEADER]
    for audit in audits:
        for part in audit.partitions:
            lines.append((audit.table, audit.kind, str(part.partition), f"[{part.start}, {part.end})",
                          str(part.records_fetched), str(part.rows_written), str(part.quarantined)))
        mb = audit.bytes_fetched / 1e6
        lines.append((audit.table, "total", "", f"{mb:.1f} MB in {audit.seconds:.1f}s",
                      str(audit.records_fetched), str(audit.rows_written), str(audit.quarantined)))
    widths = [max(len(row[i]) for row in lines) for i in range(len(_HEADER))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in lines]
    text.insert(1, "  ".join("-" * width for width in widths))
    for audit in audits:
        for gap in audit.gaps:
            text.append(f"gap: {audit.table} partition {gap.partition} offsets "
                        f"[{gap.start}, {gap.end}) {gap.reason}")
        for note in audit.notes:
            text.append(f"note: {audit.table}: {note}")
    return "\n".join(text)
