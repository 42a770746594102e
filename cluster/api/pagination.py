"""The API's pagination: DRF's page numbers, with a malformed ``page`` refused as bad input.

A ``page`` that is not a whole number of 1 or more (``-1``, ``0``, ``abc``) is a client's
mistake and answers 400 naming the parameter; a well-formed page past the last one stays
DRF's 404 ("Invalid page."), as the list simply has no such page.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination

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
