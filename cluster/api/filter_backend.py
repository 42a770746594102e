"""The API's filter backend: django-filter, with query strings and path ids that cannot reach
the database as they are answered before they do.

- A query parameter with a NUL or another control character answers 400 for that parameter
  (PostgreSQL refuses NUL in text: it was a 500).
- Datetimes are compared in UTC. Python accepts UTC offsets up to 24 h, PostgreSQL only up to
  15:59 (``?submitted_before=0727-05-30T06:58:36-18:14`` was a 500); a datetime that has no
  UTC equivalent (year 1 minus an offset) answers 400.
- A path id or slug with a control character names nothing: 404 (``get_object`` filters
  through here first).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django_filters import utils
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import NotFound, ValidationError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
CONTROL_MESSAGE = "Control characters (such as NUL) are not allowed."


def _to_utc(value):
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, slice):
        return slice(_to_utc(value.start), _to_utc(value.stop), value.step)
    return value


class StrictDjangoFilterBackend(DjangoFilterBackend):
    def filter_queryset(self, request, queryset, view):
        for value in getattr(view, "kwargs", {}).values():
            if isinstance(value, str) and _CONTROL.search(value):
                raise NotFound()
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        errors = {
            name: [CONTROL_MESSAGE]
            for name, values in filterset.data.lists()
            if any(_CONTROL.search(v) for v in values if isinstance(v, str))
        }
        if errors:
            raise ValidationError(errors)
        if not filterset.is_valid():
            raise utils.translate_validation(filterset.errors)
        for name, value in list(filterset.form.cleaned_data.items()):
            try:
                filterset.form.cleaned_data[name] = _to_utc(value)
            except (OverflowError, ValueError):
                message = "This date and time has no UTC equivalent."
                raise ValidationError({name: [message]}) from None
        return filterset.qs
