"""Timelines across a failover: noticing a promotion, and what Kafka holds that it lost.

After a promotion the new primary's history leaves the old timeline at a switch point.
Changes the old primary had sent past it (its standby never received them) are in Kafka but
not in the database, and the new primary reuses their positions for other changes: a
consumer dropping replays by position would drop those. Only ``synchronized_standby_slots``
on the old primary prevents it (see the README's failover section); walcast says when it
happened (``failover_diverged``), and in exactly-once mode never skips the new timeline's
changes because of positions Kafka holds from the old one.
"""

from __future__ import annotations

import structlog

from capture.lsn import format_lsn
from capture.replication.client import ReplicationStream
from capture.state.offsets import OffsetRecord

log = structlog.get_logger("walcast.daemon")


class TimelineWatch:
    """The timeline the daemon last streamed from, and the highest commit it produced."""

    def __init__(self, slot: str) -> None:
        self._slot = slot
        self.timeline: int | None = None
        self.highest_commit = 0
        """The highest commit LSN whose messages this process produced (any session)."""

    def check(self, stream: ReplicationStream, highest_commit: int, *, exactly_once: bool) -> None:
        """Note a failover (a higher timeline), and whether Kafka got changes it lost.

        Exactly-once: what Kafka committed is in the offsets record (see :meth:`skip_bound`);
        the units begun in the last session may have been aborted, so only at-least-once
        judges by what this process produced.
        """
        self.highest_commit = max(self.highest_commit, highest_commit)
        previous, self.timeline = self.timeline, stream.timeline
        if previous is None or stream.timeline == previous:
            return
        end = stream.timeline_ends.get(previous)
        failover = log.bind(
            slot=self._slot,
            server=stream.server,
            timeline=stream.timeline,
            previous_timeline=previous,
        )
        if not exactly_once and end is not None and self.highest_commit >= end:
            failover.error(
                "failover_diverged",
                switch_lsn=format_lsn(end),
                published_up_to=format_lsn(self.highest_commit),
                detail=f"walcast published changes committed on timeline {previous} between "
                f"{format_lsn(end)} and {format_lsn(self.highest_commit)}, which the promoted "
                f"server's history does not hold (its timeline {stream.timeline} starts at "
                f"{format_lsn(end)}): they are in Kafka although the database lost them, and "
                "new changes reuse their positions; set synchronized_standby_slots on the "
                "primary to the standbys' physical slots",
            )
            return
        failover.warning(
            "timeline_changed",
            switch_lsn=format_lsn(end) if end is not None else None,
            detail="the server was promoted (a failover); walcast streams on from the slot's "
            "synchronized copy",
        )

    def skip_bound(
        self, stream: ReplicationStream, record: OffsetRecord | None, last: int | None
    ) -> int | None:
        """Exactly-once: how far the replay is skipped (Kafka holds it), never past a fork.

        Kafka's position ``last`` was written on the timeline its ``record`` names. If this
        server's history left that timeline before ``last``, the units between are not in
        this history: skipping by LSN would drop this timeline's own changes there.
        """
        if last is None or record is None or record.timeline is None:
            return last
        end = stream.timeline_ends.get(record.timeline)
        if record.timeline >= stream.timeline or end is None or last < end:
            return last
        log.error(
            "failover_diverged",
            slot=self._slot,
            server=stream.server,
            timeline=stream.timeline,
            previous_timeline=record.timeline,
            switch_lsn=format_lsn(end),
            published_up_to=format_lsn(last),
            detail=f"Kafka holds changes committed on timeline {record.timeline} between "
            f"{format_lsn(end)} and {format_lsn(last)}, which this server's history does not "
            f"hold (its timeline {stream.timeline} starts at {format_lsn(end)}); walcast skips "
            "only the replay before that point and sends this timeline's changes after it; "
            "set synchronized_standby_slots on the primary to the standbys' physical slots",
        )
        return end - 1
