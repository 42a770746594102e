"""The API's pagination: DRF's page numbers, with a malformed ``page`` refused as bad input;
and, for a table too long to count or sort per page (the energy ledger), keyset pages
(``KeysetPagination``).

A ``page`` that is not a whole number of 1 or more (``-1``, ``0``, ``abc``) is a client's
mistake and answers 400 naming the parameter; a well-formed page past the last one stays
DRF's 404 ("Invalid page."), as the list simply has no such page.
"""

from __future__ import annotations

import json
from base64 import urlsafe_b64decode, urlsafe_b64encode
from datetime import UTC, datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import Cursor, CursorPagination, PageNumberPagination
from rest_framework.utils.urls import replace_query_param

PAGE_MESSAGE = "A page is a whole number of 1 or more, or 'last'."


class StrictPageNumberPagination(PageNumberPagination):
    def get_page_number(self, request, paginator):
        number = super().get_page_number(request, paginator)
        if number in self.last_page_strings:
            return number
        text = str(number)
        # Read as digits, not converted: int() of more than 4,300 digits raises ValueError
        # (Python's limit on integer strings), which answered 500 on every list.
        if not (text.isascii() and text.isdigit() and text.lstrip("0")):
            raise ValidationError({self.page_query_param: [PAGE_MESSAGE]})
        return number


CURSOR_MESSAGE = "Not a cursor this list gave: follow the 'next' and 'previous' links."
KEYSET_PAGE_MESSAGE = (
    "This list is paged by cursor, not by page number: follow the 'next' and 'previous' links."
)


class KeysetPagination(CursorPagination):
    """Pages of a long, growing table read by position, each for the cost of one page.

    A page is the ``page_size`` rows after (``next``) or before (``previous``) the row a
    cursor names, by ``ordering``: columns that are never null and together unique, all
    ascending, with an index on them in that order. The query seeks from the index's
    position (the first column's bound is the index's, the rest filter at most the rows
    that share that first value) and reads one row more than a page to know if another
    follows: no count, no offset, no sort. (Page numbers counted the whole table and
    sorted it for every page: 0.5-1 s for the ledger's first page on a 100,000-job database.)

    The response is DRF's cursor one, ``{next, previous, results}``; a cursor not made
    here is a 400 naming ``cursor``, as a malformed page is. A page left empty (its rows
    deleted since its cursor was made) links nowhere; start again without a cursor.
    DRF's own ``CursorPagination`` positions on the first column only, with an offset
    among equal values capped at 1,000: a ledger hour holds a row per GPU and job, more
    than that on a large cluster, and its pages would repeat or skip rows."""

    ordering: tuple[str, ...] = ("pk",)

    def paginate_queryset(self, queryset, request, view=None):
        if "page" in request.query_params:
            # A client written for the page numbers every other list uses would otherwise
            # read the first page again for each ``page`` and never see the rest.
            raise ValidationError({"page": [KEYSET_PAGE_MESSAGE]})
        self.request = request
        self.base_url = request.build_absolute_uri()
        self.page_size = self.get_page_size(request)
        self.model = queryset.model
        self.cursor = self.decode_cursor(request)
        reverse = self.cursor is not None and self.cursor.reverse
        queryset = queryset.order_by(*(f"-{f}" if reverse else f for f in self.ordering))
        if self.cursor is not None:
            queryset = queryset.filter(self._beyond(self.cursor.position, reverse=reverse))
        rows = list(queryset[: self.page_size + 1])
        more = len(rows) > self.page_size
        self.page = rows[: self.page_size]
        if reverse:
            self.page.reverse()
            self.has_next, self.has_previous = True, more
        else:
            self.has_next, self.has_previous = more, self.cursor is not None
        self.display_page_controls = self.has_next or self.has_previous
        return self.page

    def _beyond(self, key: tuple, *, reverse: bool) -> Q:
        """Rows after ``key`` in the ordering (before it, ``reverse``): the first column's
        bound, which the index seeks to, and the comparison of the whole key."""
        op = "lt" if reverse else "gt"
        fields = self.ordering
        after = Q(**{f"{fields[-1]}__{op}": key[-1]})
        for field, value in zip(fields[-2::-1], key[-2::-1], strict=True):
            after = Q(**{f"{field}__{op}": value}) | (Q(**{field: value}) & after)
        return Q(**{f"{fields[0]}__{op}e": key[0]}) & after

    def _key(self, row) -> tuple:
        return tuple(getattr(row, field) for field in self.ordering)

    def get_next_link(self):
        if not (self.has_next and self.page):
            return None
        return self.encode_cursor(
            Cursor(offset=0, reverse=False, position=self._key(self.page[-1]))
        )

    def get_previous_link(self):
        if not (self.has_previous and self.page):
            return None
        return self.encode_cursor(Cursor(offset=0, reverse=True, position=self._key(self.page[0])))

    def encode_cursor(self, cursor):
        values = [v.isoformat() if isinstance(v, datetime) else v for v in cursor.position]
        text = json.dumps([int(cursor.reverse), values], separators=(",", ":"))
        encoded = urlsafe_b64encode(text.encode()).decode("ascii")
        return replace_query_param(self.base_url, self.cursor_query_param, encoded)

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            reverse, values = json.loads(urlsafe_b64decode(encoded.encode("ascii")))
            if reverse not in (0, 1) or len(values) != len(self.ordering):
                raise ValueError(encoded)
            key = tuple(
                self.model._meta.get_field(field).to_python(value)
                for field, value in zip(self.ordering, values, strict=True)
            )
            if any(v is None or (isinstance(v, datetime) and v.tzinfo is None) for v in key):
                raise ValueError(encoded)
            # In UTC, as the filters compare (``filter_backend``): Python takes offsets up to
            # 23:59, PostgreSQL only to 15:59, and year 1 at +05:00 is no UTC time at all.
            key = tuple(v.astimezone(UTC) if isinstance(v, datetime) else v for v in key)
        except (
            ValueError,
            TypeError,
            UnicodeError,
            DjangoValidationError,
            # Infinity for an id (JSON as Python reads it), a datetime with no UTC
            # equivalent, brackets nested past the parser's depth: each was a 500
            OverflowError,
            RecursionError,
        ):
            raise ValidationError({self.cursor_query_param: [CURSOR_MESSAGE]}) from None
        return Cursor(offset=0, reverse=bool(reverse), position=key)
