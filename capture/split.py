"""Split an UPDATE that changes the key into a DELETE and an INSERT.

As DTS's "split message delivery after partition key update": a consumer keyed by the
primary key must see the old key's row disappear in the old key's partition and the new
one appear in the new key's. Both halves keep the UPDATE's ordinal, so
``(commit_lsn, ordinal, op)`` still identifies each of them.

An UPDATE changed the key when the server sent an old key image (``'K'``, only sent when
a replica-identity column changed), or, with REPLICA IDENTITY FULL, when a primary-key
column's value differs between the old and new rows. Unchanged TOAST columns of the new
row stay marked as such in the INSERT.
"""

from __future__ import annotations

from capture.events import ChangeEvent, Op
from capture.pgoutput.messages import UNCHANGED_TOAST


def key_changed(event: ChangeEvent) -> bool:
    """Whether an UPDATE moved the row to another key."""
    before, after = event.before, event.after
    if event.op is not Op.UPDATE or before is None or after is None:
        return False
    if before.key_only:
        return True
    names = event.table.column_names
    index = {n: i for i, n in enumerate(names)}
    for name in event.table.primary_key:
        i = index[name]
        new = after.tuple.values[i]
        if new is not UNCHANGED_TOAST and before.tuple.values[i] != new:
            return True
    return False


def split_key_update(event: ChangeEvent) -> tuple[ChangeEvent, ...]:
    """``(event,)``, or ``(DELETE, INSERT)`` for an UPDATE that changed the key."""
    if not key_changed(event):
        return (event,)
    delete = ChangeEvent(
        Op.DELETE, event.table, event.before, None, event.xid, event.commit_lsn,
        event.commit_ts, event.ordinal, lsn=event.lsn,
    )  # fmt: skip
    insert = ChangeEvent(
        Op.INSERT, event.table, None, event.after, event.xid, event.commit_lsn,
        event.commit_ts, event.ordinal, lsn=event.lsn,
    )  # fmt: skip
    return (delete, insert)
