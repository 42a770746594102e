"""A change page of the admin posts every field as it showed it: a change another writer
(the API, an agent, a round, another admin) made to a field on the form while the page was
open was written back over. The page now carries what it showed (each field's hidden
``initial-`` value) and its save, under the row's lock, refuses a field it changed that
was changed meanwhile, naming it, and leaves the other writer's changes to the fields it
did not change (``cluster.admin._RefusesStaleEdits``)."""

from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cluster.models import Budget, Gpu, Job, Membership, Node, Team


class _FormValues(HTMLParser):
    """What a browser posts for the page's change form (``<form id="<model>_form">``)."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside, self.values = form_id, False, []
        self.select: str | None = None
        self.first_option: str | None = None
        self.selected = False
        self.textarea: str | None = None
        self.text = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.inside = attrs.get("id") == self.form_id
        if not self.inside:
            return
        name = attrs.get("name")
        if tag == "input" and name:
            kind = attrs.get("type", "text")
            if kind in ("submit", "button", "image", "file", "reset"):
                return
            if kind in ("checkbox", "radio") and "checked" not in attrs:
                return
            self.values.append((name, attrs.get("value") or ("on" if kind == "checkbox" else "")))
        elif tag == "select" and name:
            self.select, self.first_option, self.selected = name, None, False
        elif tag == "option" and self.select:
            value = attrs.get("value") or ""
            if self.first_option is None:
                self.first_option = value
            if "selected" in attrs:
                self.values.append((self.select, value))
                self.selected = True
        elif tag == "textarea" and name:
            self.textarea, self.text = name, ""

    def handle_data(self, data):
        if self.textarea:
            self.text += data

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False
        elif tag == "select" and self.select:
            if not self.selected and self.first_option is not None:
                self.values.append((self.select, self.first_option))
            self.select = None
        elif tag == "textarea" and self.textarea:
            self.values.append((self.textarea, self.text.removeprefix("\n")))
            self.textarea = None


class _Session:
    """An admin with the object's change page open in a browser."""

    def __init__(self, user, obj) -> None:
        self.client = Client()
        self.client.force_login(user)
        meta = obj._meta
        self.url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
        self.form_id = f"{meta.model_name}_form"
        page = self.client.get(self.url)
        assert page.status_code == 200
        self.shown(page)

    def shown(self, page) -> None:
        """The page as ``page`` shows it (the page answered to a post: a refusal)."""
        parser = _FormValues(self.form_id)
        parser.feed(page.content.decode())
        self.values = parser.values

    def save(self, **changes):
        """The page posted with ``changes`` typed into it."""
        data: dict[str, list[str]] = {}
        for name, value in self.values:
            data.setdefault(name, []).append(value)
        for name, value in changes.items():
            assert name in data, name
            data[name] = [value]
        return self.client.post(self.url, data)


def _team(admin_user, make_node, make_job):
    return Team.objects.create(name="Stale Vision", slug="stale-vision")


def _node(admin_user, make_node, make_job):
    return make_node("node-01", gpus=1)


def _gpu(admin_user, make_node, make_job):
    return make_node("node-01", gpus=1).gpus.get()


def _job(admin_user, make_node, make_job):
    team = Team.objects.create(name="Stale Vision", slug="stale-vision")
    Membership.objects.create(user=admin_user, team=team)
    return make_job(owner=admin_user, team=team)


def _membership(admin_user, make_node, make_job):
    team = Team.objects.create(name="Stale Vision", slug="stale-vision")
    for slug in ("stale-a", "stale-b"):
        Team.objects.create(name=slug, slug=slug)
    return Membership.objects.create(user=admin_user, team=team)


def _settings(admin_user, make_node, make_job):
    from scheduling.models import SchedulerSettings

    SchedulerSettings.load()
    SchedulerSettings.objects.filter(pk=1).update(policy="fifo", round_interval_s=60)
    return SchedulerSettings.load()


def _policy(n: int):
    """The ``n``-th policy other than FIFO."""
    from scheduling.core.registry import policy_names

    return lambda: [name for name in policy_names() if name != "fifo"][n]


def _team_pk(slug: str):
    return lambda: str(Team.objects.get(slug=slug).pk)


def _budget(admin_user, make_node, make_job):
    now = timezone.now().replace(microsecond=0)
    return Budget.objects.create(
        team=Team.objects.create(name="Stale Vision", slug="stale-vision"),
        period_start=now - timedelta(days=1),
        period_end=now + timedelta(days=1),
        energy_limit_kwh=100.0,
        carbon_limit_kg=50.0,
    )


# (the object, the field both admins change and its two values, the other field, its value,
# and how the stored values read)
CASES = {
    "team": (_team, "name", "Stale A", "Stale B", "slug", "stale-2", str),
    "node": (_node, "rack_label", "rack-7", "rack-8", "switch_label", "switch-9", str),
    "gpu": (_gpu, "power_limit_w", "300", "250", "sm_clock_mhz", "1200", str),
    "job": (_job, "name", "first", "second", "priority", "5", str),
    "membership": (
        _membership,
        "team_id",
        _team_pk("stale-a"),
        _team_pk("stale-b"),
        "role",
        "lead",
        str,
    ),
    "budget": (_budget, "energy_limit_kwh", "150", "175", "carbon_limit_kg", "70", float),
    "settings": (_settings, "policy", _policy(0), _policy(1), "round_interval_s", "120", str),
}
MODELS = {"team": Team, "node": Node, "gpu": Gpu, "job": Job, "membership": Membership}
MODELS["budget"] = Budget


def _model(kind):
    from scheduling.models import SchedulerSettings

    return SchedulerSettings if kind == "settings" else MODELS[kind]


def _stored(kind, obj, field, read):
    return read(getattr(_model(kind).objects.get(pk=obj.pk), field))


def _form_name(field: str) -> str:
    return field.removesuffix("_id")


def _value(value) -> str:
    return value() if callable(value) else value


@pytest.fixture(params=list(CASES))
def opened_twice(request, db, admin_user, make_node, make_job):
    """An object of each kind whose change page two admins opened, the first of whom has
    saved its change: (the kind, the object, the second admin's page)."""
    kind = request.param
    make, field, first, *_ = CASES[kind]
    obj = make(admin_user, make_node, make_job)
    one, two = _Session(admin_user, obj), _Session(admin_user, obj)
    assert one.save(**{_form_name(field): _value(first)}).status_code == 302
    return kind, obj, two


def test_a_save_of_a_field_changed_since_the_page_opened_is_refused(opened_twice):
    kind, obj, two = opened_twice
    _, field, first, second, _, _, read = CASES[kind]
    name = _form_name(field)

    refused = two.save(**{name: _value(second)})

    assert refused.status_code == 200  # the page again, with the refusal
    errors = refused.context["adminform"].form.errors
    assert "nothing was saved" in str(errors["__all__"])
    label = str(refused.context["adminform"].form.fields[name].label)
    assert label in str(errors["__all__"])  # names the field
    assert name in errors
    assert _stored(kind, obj, field, read) == read(_value(first))  # was written over


def test_a_save_of_another_field_goes_through_and_keeps_the_change_made_meanwhile(opened_twice):
    kind, obj, two = opened_twice
    _, field, first, _, other, value, read = CASES[kind]

    saved = two.save(**{other: value})

    assert saved.status_code == 302, saved.context["adminform"].form.errors
    assert _stored(kind, obj, field, read) == read(_value(first))  # was written back
    assert _stored(kind, obj, other, read) == read(value)


@pytest.mark.django_db
def test_a_change_by_another_writer_than_the_admin_is_refused_too(admin_user, make_node):
    # An agent's registration or the API's edit: the same refusal as another admin's save.
    gpu = make_node("node-01", gpus=1).gpus.get()
    page = _Session(admin_user, gpu)
    Gpu.objects.filter(pk=gpu.pk).update(power_limit_w=280)

    refused = page.save(power_limit_w="300")

    assert refused.status_code == 200
    assert "power limit" in str(refused.context["adminform"].form.errors["__all__"]).lower()
    assert Gpu.objects.get(pk=gpu.pk).power_limit_w == 280


@pytest.mark.django_db
def test_the_same_change_made_meanwhile_is_no_conflict(admin_user, make_node):
    node = make_node("node-01", gpus=1)
    one, two = _Session(admin_user, node), _Session(admin_user, node)

    assert one.save(rack_label="rack-7").status_code == 302
    assert two.save(rack_label="rack-7").status_code == 302
    assert Node.objects.get(pk=node.pk).rack_label == "rack-7"


@pytest.mark.django_db
def test_a_refused_page_posted_again_is_refused_again(admin_user, make_node, make_job):
    # The page shown with the refusal still carries what it first showed: a date and
    # time's hidden values came back as what the admin had typed, so posting it again
    # passed for "unchanged" and dropped the admin's edit without a word.
    budget = _budget(admin_user, make_node, make_job)
    page = _Session(admin_user, budget)
    moved = budget.period_end + timedelta(hours=5)
    Budget.objects.filter(pk=budget.pk).update(period_end=moved)

    first = page.save(period_end_0=(budget.period_end + timedelta(days=1)).strftime("%Y-%m-%d"))
    assert first.status_code == 200
    page.shown(first)
    again = page.save()

    assert again.status_code == 200
    assert "nothing was saved" in str(again.context["adminform"].form.errors["__all__"])
    assert Budget.objects.get(pk=budget.pk).period_end == moved


@pytest.mark.django_db
@pytest.mark.parametrize(("typed", "kept"), [("300", False), (None, True)])
def test_a_gpu_row_of_its_nodes_page_refuses_a_stale_edit_and_keeps_the_others(
    admin_user, make_node, typed, kept
):
    # The node page's GPU rows posted every value as shown too: a power limit set (by the
    # API or the GPU's own page) while the node page was open went back to the old one.
    node = make_node("node-01", gpus=2)
    gpu = node.gpus.get(index=1)
    page = _Session(admin_user, node)
    Gpu.objects.filter(pk=gpu.pk).update(power_limit_w=280)

    if typed is None:  # the admin changes another field of the row
        answer = page.save(**{"gpus-1-sm_clock_mhz": "1200"})
        assert answer.status_code == 302
        assert Gpu.objects.get(pk=gpu.pk).sm_clock_mhz == 1200
    else:
        answer = page.save(**{"gpus-1-power_limit_w": typed})
        assert answer.status_code == 200
        errors = answer.context["inline_admin_formsets"][0].formset.errors[1]
        assert "nothing was saved" in str(errors["__all__"]), errors
    assert Gpu.objects.get(pk=gpu.pk).power_limit_w == 280  # was written back to empty


@pytest.mark.django_db
def test_a_team_page_keeps_a_lead_promoted_while_it_was_open(admin_user, make_user):
    # The team page's membership rows posted every value as shown: saved to rename the
    # team, it demoted a member promoted to lead on the membership's page meanwhile.
    team = Team.objects.create(name="Stale Vision", slug="stale-vision")
    membership = Membership.objects.create(user=make_user("bea"), team=team)
    page = _Session(admin_user, team)
    Membership.objects.filter(pk=membership.pk).update(role="lead")

    assert page.save(name="Stale Vision 2").status_code == 302

    assert Team.objects.get(pk=team.pk).name == "Stale Vision 2"
    assert Membership.objects.get(pk=membership.pk).role == "lead"


def test_a_workload_edit_is_checked_against_the_hints_as_stored_not_as_shown(admin_user, make_job):
    # The page's workload check (``JobAdminForm.clean``) read the hints as the page showed
    # them, but a hint the admin left as shown keeps the stored value: another admin's
    # removal of ``resembles`` meanwhile, and this page's near miss of a catalog workload
    # saved with no hint, a job the check refuses.
    team = Team.objects.create(name="Stale Vision", slug="stale-vision")
    Membership.objects.create(user=admin_user, team=team)
    job = make_job(owner=admin_user, team=team, workload="my-model", resembles="resnet50")
    page = _Session(admin_user, job)
    Job.objects.filter(pk=job.pk).update(resembles="")  # another admin, meanwhile

    response = page.save(workload="resnet_50")

    assert response.status_code == 200  # the page again, with the refusal
    assert "did you mean" in response.content.decode()
    stored = Job.objects.get(pk=job.pk)
    assert (stored.workload, stored.resembles) == ("my-model", "")
