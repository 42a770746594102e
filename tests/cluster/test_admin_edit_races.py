"""The admin's change pages of a GPU and a team read the object under lock at the POST, as
the API's edits do: the page saves the whole row, and a save that read the row before a
retire committed wrote ``retired_at`` back to empty; one beside a delete inserted the
object again (a fifth live probe: the API had the same race, fixed by ``services.lock_gpu``
and ``TeamViewSet.get_object``)."""

import threading
import time

import pytest
from django.contrib.admin.sites import site
from django.db import connection, transaction
from django.test import Client, RequestFactory
from django.urls import reverse

from cluster.models import Gpu, Team
from cluster.services import delete_team, retire_gpu


def _page(user, obj, **changes) -> dict:
    """The object's admin change form as a browser posts it (every field as the page
    shows it), with ``changes`` made."""
    request = RequestFactory().get("/")
    request.user = user
    model_admin = site._registry[type(obj)]
    form = model_admin.get_form(request, obj, change=True)(instance=obj)
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if hasattr(field.widget, "decompress"):  # (a date and a time)
            parts = field.widget.decompress(value)
            for i, part in enumerate(parts):
                data[f"{name}_{i}"] = field.widget.widgets[i].format_value(part) or ""
                if field.show_hidden_initial:
                    data[f"initial-{name}_{i}"] = data[f"{name}_{i}"]
            continue
        value = field.prepare_value(value)
        data[name] = "" if value is None else value
    for inline in model_admin.get_inline_instances(request, obj):
        prefix = inline.get_formset(request, obj).get_default_prefix()
        for part, count in (("TOTAL", 0), ("INITIAL", 0), ("MIN_NUM", 0), ("MAX_NUM", 1000)):
            data[f"{prefix}-{part}_FORMS"] = str(count)
    data.update(changes)
    return data


def _post_while(writer, user, url, data):
    """``data`` posted to ``url`` while ``writer`` (in its own transaction) holds its locks;
    it commits a second later, while the page's save waits on it. The answer."""
    client = Client()
    client.force_login(user)
    locked, release, outcome = threading.Event(), threading.Event(), {}

    def writing():
        try:
            with transaction.atomic():
                writer()
                locked.set()
                release.wait(timeout=10)
        finally:
            connection.close()

    def posting():
        try:
            outcome["response"] = client.post(url, data)
        finally:
            connection.close()

    first = threading.Thread(target=writing)
    first.start()
    assert locked.wait(timeout=10)
    second = threading.Thread(target=posting)
    second.start()
    time.sleep(1.0)  # the page's save reaches the row while the writer holds it
    release.set()
    first.join(timeout=10)
    second.join(timeout=10)
    return outcome["response"]


@pytest.mark.django_db(transaction=True)
def test_a_gpu_page_saved_beside_a_retire_keeps_both(admin_user, make_node):
    gpu = make_node(gpus=2).gpus.order_by("index").first()
    data = _page(admin_user, gpu, power_limit_w="300")

    response = _post_while(
        lambda: retire_gpu(gpu, actor=None),
        admin_user,
        reverse("admin:cluster_gpu_change", args=[gpu.pk]),
        data,
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    stored = Gpu.objects.get(pk=gpu.pk)
    assert stored.retired_at is not None  # was written back to empty
    assert stored.power_limit_w == 300


@pytest.mark.django_db(transaction=True)
def test_a_team_page_saved_beside_the_teams_delete_does_not_bring_it_back(admin_user):
    team = Team.objects.create(name="Scratch", slug="scratch")
    data = _page(admin_user, team, name="Scratch 2")

    response = _post_while(
        lambda: delete_team(team, actor=None),
        admin_user,
        reverse("admin:cluster_team_change", args=[team.pk]),
        data,
    )

    assert response.status_code == 302
    assert response.url == reverse("admin:index")  # the admin's "does not exist" answer
    assert not Team.objects.exists()  # was inserted again, renamed
