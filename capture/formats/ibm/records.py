"""Reading IBM Q Replication delimited records back: the fields of each record.

The inverse of :mod:`capture.formats.ibm.encode`'s rendering, for tests, tools and consumers
written in Python (the Spark jobs read the same text with regular expressions,
:mod:`pipeline.formats.ibm.decode`). Any CSV reader in multi-line mode with the same delimiters
reads it too.
"""

from __future__ import annotations

from collections.abc import Iterator


def split_records(
    data: bytes | str,
    *,
    column_delimiter: str = ",",
    record_delimiter: str = "\n",
    string_delimiter: str = '"',
) -> Iterator[list[str | None]]:
    """Parse delimited records: per record, its fields (None for an empty field).

    Quoted fields come back without their delimiters and with doubled delimiters
    undone; record delimiters inside quotes belong to the value. A quoted empty string
    is ``""`` (an empty str), an empty field None (NULL).
    """
    text = data.decode() if isinstance(data, bytes) else data
    cd, rd, q = column_delimiter, record_delimiter, string_delimiter
    n = len(text)
    fields: list[str | None] = []
    i = 0
    while i < n:
        if text[i] == q:
            parts = []
            i += 1
            while True:
                j = text.find(q, i)
                if j < 0:
                    raise ValueError(f"unterminated quoted field at offset {i - 1}")
                parts.append(text[i:j])
                i = j + 1
                if i < n and text[i] == q:
                    parts.append(q)
                    i += 1
                    continue
                break
            fields.append("".join(parts))
        else:
            j = i
            while j < n and text[j] != cd and text[j] != rd:
                j += 1
            fields.append(text[i:j] or None)
            i = j
        if i >= n:
            break
        char = text[i]
        i += 1
        if char == rd:
            yield fields
            fields = []
        elif char == cd:
            if i >= n:
                fields.append(None)
                break
        else:
            raise ValueError(f"unexpected {char!r} after a quoted field at offset {i - 1}")
    if fields:
        yield fields
