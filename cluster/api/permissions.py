"""Object permissions for the cluster API; the visibility rules themselves are in queries.py.

A write by an admin needs the Django permission its effect needs, ``cluster.<verb>_<model>``
(``queries.admin_may``), as the Django admin asks for it: POST adds, PUT and PATCH change,
DELETE deletes, and an action on one object (a node's new agent token, a GPU's retirement)
changes it. ``is_staff`` alone let a staff user the admin allows only to view do all of it
here (an eighth probe of the live service)."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from cluster.queries import admin_may, admin_sees, can_manage_budgets_of

_VERBS = {"POST": "add", "PUT": "change", "PATCH": "change", "DELETE": "delete"}


def write_verb(request, view) -> str:
    """``add``, ``change`` or ``delete``: what the request does to the view's model."""
    if getattr(view, "detail", False) and request.method == "POST":
        return "change"  # an action on one object (issue-token, retire)
    return _VERBS.get(request.method, "change")


class ReadOnlyOrAdmin(BasePermission):
    """Anyone authenticated reads (the queryset limits what); only admins holding the
    permission write. The view names its model in ``permission_model``."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        return admin_may(request.user, f"{write_verb(request, view)}_{view.permission_model}")


class AdminOnly(ReadOnlyOrAdmin):
    """Admins who may view the model read; admins holding the permission write (nodes,
    GPUs). A staff user granted nothing reads none of it, as a user does."""

    def has_permission(self, request, view) -> bool:
        if not admin_sees(request.user, f"cluster.view_{view.permission_model}"):
            return False
        return super().has_permission(request, view)


class BudgetPermission(BasePermission):
    """Team members read a budget; its team's leads and admins holding the permission
    change and delete it."""

    def has_object_permission(self, request, view, obj) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return can_manage_budgets_of(request.user, obj.team, write_verb(request, view))
