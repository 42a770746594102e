"""Open dashboards follow changes of their user's access (``frontend/consumers.py``).

A dashboard joins its team groups when it connects; without this, a user removed from a team
would keep receiving that team's feed until they reload. Every saved or deleted Membership, and
every saved or deleted user (staff flag, active flag), tells that user's open dashboards to
re-check their groups once the change is committed. Queryset ``update()``/``bulk_create`` send
no signals: code that changes memberships or staff flags that way must call
``notify_access_changed`` itself (none does today).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from cluster.models import Membership
from frontend.broadcast import notify_access_changed


def _after_commit(user_id: int | None) -> None:
    if user_id is not None:
        transaction.on_commit(lambda: notify_access_changed(user_id))


@receiver(post_save, sender=Membership, dispatch_uid="frontend.membership_saved")
@receiver(post_delete, sender=Membership, dispatch_uid="frontend.membership_deleted")
def membership_changed(sender, instance, **kwargs):
    _after_commit(instance.user_id)


def user_changed(sender, instance, created=False, update_fields=None, **kwargs):
    # A login saves last_login only: nothing about access changed.
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    _after_commit(instance.pk)


def connect_user_signals() -> None:
    user_model = get_user_model()
    post_save.connect(user_changed, sender=user_model, dispatch_uid="frontend.user_saved")
    post_delete.connect(user_changed, sender=user_model, dispatch_uid="frontend.user_deleted")
