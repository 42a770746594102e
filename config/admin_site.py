"""The admin site: Django's, with every list refusing a lookup value the database cannot take
as Django refuses any lookup it cannot use (back to the list without it, ``?e=1``).

A year outside 1..9999 in a year lookup (``?created_at__year=0``, ``__iso_year``,
``__year__gte``) passes Django's own checks and raises ValueError only while the list counts
its rows: a 500 on every list with a date field (a live probe), Django's user list included."""

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList


class BoundedLookupsChangeList(ChangeList):
    def get_results(self, request):
        # (Django turns a page past the last into IncorrectLookupParameters here too)
        try:
            super().get_results(request)
        except (ValueError, OverflowError) as exc:
            raise IncorrectLookupParameters(exc) from exc


class BoundedLookups:
    """ModelAdmin mixin: its list is a ``BoundedLookupsChangeList``."""

    def get_changelist(self, request, **kwargs):
        return BoundedLookupsChangeList


class WattflowAdminSite(admin.AdminSite):
    def register(self, model_or_iterable, admin_class=None, **options):
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, BoundedLookups):
            admin_class = type(
                admin_class.__name__,
                (BoundedLookups, admin_class),
                {"__module__": admin_class.__module__},
            )
        super().register(model_or_iterable, admin_class, **options)
