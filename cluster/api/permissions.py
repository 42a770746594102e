"""Object permissions for the cluster API; the visibility rules themselves are in queries.py."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from cluster.queries import can_manage_budgets_of


class ReadOnlyOrAdmin(BasePermission):
    """Anyone authenticated reads (the queryset limits what); only admins write."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or request.user.is_staff


class BudgetPermission(BasePermission):
    """Team members read a budget; its team's leads and admins change it."""

    def has_object_permission(self, request, view, obj) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return can_manage_budgets_of(request.user, obj.team)
