"""The admin's change pages of a GPU and a team read the object under lock at the POST, as
the API's edits do: the page saves the whole row, and a save that read the row before a
retire committed wrote ``retired_at`` back to empty; one beside a delete inserted the
object again (a fifth live probe: the API had the same race, fixed by ``services.lock_gpu``
and ``TeamViewSet.get_object``)."""

import time

import pytest
from django.contrib.admin.sites import site
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import reverse
from support.races import Gate, in_thread, while_held

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
    # (the page's save reaches the row while the writer holds it)
    return while_held(writer, lambda: client.post(url, data))


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


@pytest.mark.django_db(transaction=True)
def test_a_node_page_changing_two_gpus_beside_a_gpu_edit_does_not_deadlock(
    admin_user, make_node, monkeypatch
):
    # The node page locked its changed GPU rows (``GpuInlineFormSet``) and only then, at
    # its save, its node's row; a GPU edit (the API's, the GPU page's: ``lock_gpu``) or a
    # retire locks the node first, then the GPU. Side by side, each waited on the other and
    # the database aborted one of them (a 500 on one side).
    from cluster.admin import NodeAdmin
    from cluster.services import lock_gpu

    node = make_node(gpus=2)
    first, second = node.gpus.order_by("index")
    data = {
        "name": node.name, "switch_label": node.switch_label, "rack_label": node.rack_label,
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "2", "gpus-INITIAL_FORMS": "2",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    for i, gpu in enumerate((first, second)):
        row = {
            "id": gpu.pk, "node": node.pk, "index": gpu.index, "uuid": gpu.uuid,
            "model": gpu.model, "memory_mb": gpu.memory_mb, "power_limit_w": "300",
            "sm_clock_mhz": "",
        }  # fmt: skip
        data.update({f"gpus-{i}-{name}": value for name, value in row.items()})

    validated = Gate()
    save_model = NodeAdmin.save_model

    def save_after_the_edit_started(self, request, obj, form, change):
        validated.pause()  # the page's rows are checked (and locked), its node not saved yet
        return save_model(self, request, obj, form, change)

    monkeypatch.setattr(NodeAdmin, "save_model", save_after_the_edit_started)
    client = Client()
    client.force_login(admin_user)

    def editing():
        with transaction.atomic():
            gpu = lock_gpu(first)
            gpu.sm_clock_mhz = None
            gpu.save(update_fields=["sm_clock_mhz"])
        return "saved"

    # (an exception: the deadlock's victim, reported below)
    page = in_thread(
        lambda: client.post(reverse("admin:cluster_node_change", args=[node.pk]), data)
    )
    validated.wait_reached()
    edit = in_thread(editing)
    time.sleep(0.5)  # the edit takes the node's lock (or waits for the page's), then the GPU's
    validated.open()
    outcome = {"page": page.outcome(timeout=20), "edit": edit.outcome(timeout=20)}

    assert outcome["edit"] == "saved", outcome["edit"]
    assert getattr(outcome["page"], "status_code", outcome["page"]) == 302
    assert set(node.gpus.values_list("power_limit_w", flat=True)) == {300}


@pytest.mark.django_db(transaction=True)
def test_a_gpu_page_shows_the_sites_power_cap_read_only_and_its_save_keeps_it(
    admin_user, make_node
):
    # given a GPU whose agent registered a site's 300 W cap (nvidia-smi -pl): the agent
    # holds its limits to the cap it read, so one typed on the page would be planned on
    # while the agent set another
    gpu = make_node(gpus=1).gpus.get()
    Gpu.objects.filter(pk=gpu.pk).update(site_power_limit_w=300)
    gpu.refresh_from_db()
    data = _page(admin_user, gpu, power_limit_w="250")
    assert "site_power_limit_w" not in data  # not a field of the form
    client = Client()
    client.force_login(admin_user)
    page = client.get(reverse("admin:cluster_gpu_change", args=[gpu.pk])).content.decode()
    assert "300" in page

    # when an admin saves the page with a change of another field
    response = client.post(reverse("admin:cluster_gpu_change", args=[gpu.pk]), data)

    # then the cap is the agent's still
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Gpu.objects.get(pk=gpu.pk).site_power_limit_w == 300
