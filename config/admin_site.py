"""The admin site: Django's, with every registered ModelAdmin reading its query strings as
bad input where Django raised (each a 500 in a live probe, Django's own admins included):

- a list refuses a lookup value the database cannot take as Django refuses any lookup it
  cannot use (back to the list without it, ``?e=1``): a year outside 1..9999 in a year
  lookup (``?created_at__year=0``, ``__iso_year``, ``__year__gte``) passed Django's checks
  and raised ValueError while the list counted its rows;
- an add page prefilled from its query (``?team=3``) leaves out a value its model field
  cannot read (``?team=x``, ``?period_start=x``), which raised while the page rendered, and
  takes one it can as the field reads it (a period start given as text was a 500 too);
- an action on a selection that holds something other than ids (``_selected_action=x``)
  does nothing and says so, as an action on no selection does: it raised ValueError while
  the action read its rows;
- an autocomplete field shown again with a posted value its target cannot read (an invalid
  form with ``user=x``) shows it empty: the widget looked ``x`` up as an id while the page
  rendered (``ReadableAutocomplete``, also on inlines that name it)."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import AutocompleteSelect, AutocompleteSelectMultiple
from django.core.exceptions import FieldDoesNotExist, ValidationError


class BoundedLookupsChangeList(ChangeList):
    def get_results(self, request):
        # (Django turns a page past the last into IncorrectLookupParameters here too)
        try:
            super().get_results(request)
        except (ValueError, OverflowError) as exc:
            raise IncorrectLookupParameters(exc) from exc


def _read(field, value):
    """``value`` (a query string's) as ``field`` reads it; raises ValidationError, ValueError
    or TypeError where it cannot. A relation's value is kept as sent, checked by the target."""
    if field.many_to_many:
        for item in value if isinstance(value, list) else [value]:
            field.target_field.to_python(item)
        return value
    if field.is_relation:
        field.target_field.to_python(value)
        return value
    return field.to_python(value)


class _ReadableChoices:
    """An autocomplete widget that looks up only the values its target field can read."""

    def optgroups(self, name, value, attr=None):
        rel = self.field.remote_field
        to_field = getattr(rel, "field_name", None)
        target = rel.model._meta.get_field(to_field) if to_field else rel.model._meta.pk
        readable = []
        for item in value:
            try:
                target.to_python(item)
            except (ValidationError, ValueError, TypeError):
                continue
            readable.append(item)
        return super().optgroups(name, readable, attr)


class ReadableAutocompleteSelect(_ReadableChoices, AutocompleteSelect):
    pass


class ReadableAutocompleteSelectMultiple(_ReadableChoices, AutocompleteSelectMultiple):
    pass


class ReadableAutocomplete:
    """ModelAdmin or inline mixin: its autocomplete widgets are the readable ones."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        formfield = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if formfield is not None and type(formfield.widget) is AutocompleteSelect:
            formfield.widget.__class__ = ReadableAutocompleteSelect
        return formfield

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        formfield = super().formfield_for_manytomany(db_field, request, **kwargs)
        if formfield is not None and type(formfield.widget) is AutocompleteSelectMultiple:
            formfield.widget.__class__ = ReadableAutocompleteSelectMultiple
        return formfield


class BoundedLookups(ReadableAutocomplete):
    """ModelAdmin mixin: its list is a ``BoundedLookupsChangeList``, its add page's initial
    values from the query are those the model's fields can read."""

    def get_changelist(self, request, **kwargs):
        return BoundedLookupsChangeList

    def response_action(self, request, queryset):
        pk = self.model._meta.pk
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except (ValidationError, ValueError, TypeError):
            self.message_user(
                request,
                "The selection holds values that are not ids of this list: nothing was done.",
                messages.WARNING,
            )
            return None  # (the list again, as after an action on no selection)
        return super().response_action(request, queryset)

    def get_changeform_initial_data(self, request):
        initial = super().get_changeform_initial_data(request)
        kept = {}
        for name, value in initial.items():
            try:
                field = self.model._meta.get_field(name)
            except FieldDoesNotExist:  # a form's own field: its form reads it
                kept[name] = value
                continue
            try:
                kept[name] = _read(field, value)
            except (ValidationError, ValueError, TypeError):
                continue
        return kept


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
