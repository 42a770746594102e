"""Rows of a CSV file read by its header, refusing a row longer than the header.

``csv.DictReader`` puts the fields past the header's width under the key ``None`` and the
reader's callers take the named ones: a row with one field too many reads as if it had
none, its tail dropped ("1,000" iterations in a trace ran as 1; "2,4,8,16" in ElasticFlow's
cluster CSV ran as 2 x 4 x 8 GPUs; a carbon row with a stray comma imported its hour as if
whole). Every reader of a file a person gives (traces, cluster specs, grid intensity)
takes its rows from here, so each refuses such a row the same way, by its line.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator


def rows_of(
    reader: csv.DictReader, source: str, error: Callable[[str], Exception]
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of each row of ``reader``; ``error(message)`` is raised for a row
    with more fields than the header (``source``: the file's name in the message)."""
    width = len(reader.fieldnames or ())
    for row in reader:
        extra = row.get(None)  # type: ignore[call-overload]
        if extra:
            shown = ",".join(map(str, extra))
            raise error(
                f"{source}:{reader.line_num}: {width + len(extra)} fields where the header "
                f"has {width} (extra: {shown!r})"
            )
        yield reader.line_num, row
