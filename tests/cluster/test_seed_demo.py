"""seed_demo loads the demo once, and running it again changes nothing."""

import json

from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

from cluster.choices import Role
from cluster.models import Budget, Gpu, Membership, Node, Team


def _counts() -> dict[str, int]:
    return {
        "users": get_user_model().objects.count(),
        "teams": Team.objects.count(),
        "memberships": Membership.objects.count(),
        "nodes": Node.objects.count(),
        "gpus": Gpu.objects.count(),
        "budgets": Budget.objects.count(),
    }


def test_seed_demo_is_idempotent_and_keeps_tokens(db, settings, tmp_path, capsys):
    settings.WATTFLOW_VAR_DIR = tmp_path

    call_command("seed_demo")
    first_counts = _counts()
    first_tokens = json.loads((tmp_path / "agent_tokens.json").read_text())
    first_hashes = dict(Node.objects.values_list("name", "agent_token_hash"))
    call_command("seed_demo")

    assert (
        _counts()
        == first_counts
        == {
            "users": 5,
            "teams": 2,
            "memberships": 4,
            "nodes": 4,
            "gpus": 32,
            "budgets": 2,
        }
    )
    assert json.loads((tmp_path / "agent_tokens.json").read_text()) == first_tokens
    assert dict(Node.objects.values_list("name", "agent_token_hash")) == first_hashes
    assert (tmp_path / "agent_tokens.json").stat().st_mode & 0o777 == 0o600


def test_seed_demo_builds_the_described_cluster_and_logins(db, settings, tmp_path, capsys):
    settings.WATTFLOW_VAR_DIR = tmp_path

    call_command("seed_demo")
    out = capsys.readouterr().out

    tokens = json.loads((tmp_path / "agent_tokens.json").read_text())
    assert sorted(tokens) == ["node-01", "node-02", "node-03", "node-04"]
    for name, token in tokens.items():
        assert Node.for_agent_token(token).name == name
        assert token in out
    assert dict(Node.objects.values_list("name", "switch_label")) == {
        "node-01": "switch-1",
        "node-02": "switch-1",
        "node-03": "switch-2",
        "node-04": "switch-2",
    }
    gpu = Gpu.objects.get(node__name="node-03", index=7)
    assert (gpu.uuid, gpu.model, gpu.memory_mb) == ("GPU-sim-node-03-7", "A100", 40960)
    assert set(Node.objects.values_list("gpu_model", flat=True)) == {"A100"}
    assert (gpu.min_power_limit_w, gpu.default_power_limit_w, gpu.max_power_limit_w) == (
        100,
        400,
        400,
    )
    # 1410 down to 210 MHz in the 15 MHz steps of the Perseus A100 sweep
    assert gpu.supported_sm_clocks_mhz[:3] == [1410, 1395, 1380]
    assert gpu.supported_sm_clocks_mhz[-1] == 210
    assert len(gpu.supported_sm_clocks_mhz) == 81
    assert Membership.objects.get(user__username="vision_lead").role == Role.LEAD
    assert Membership.objects.get(user__username="language_member").role == Role.MEMBER
    for username, password in [
        ("admin", "wattflow-admin"),
        ("vision_lead", "vision-lead-demo"),
        ("vision_member", "vision-member-demo"),
        ("language_lead", "language-lead-demo"),
        ("language_member", "language-member-demo"),
    ]:
        assert authenticate(username=username, password=password) is not None
        assert f"{username}" in out and password in out
    assert get_user_model().objects.get(username="admin").is_staff
    assert set(Budget.objects.values_list("team__slug", flat=True)) == {"vision", "language"}
    vision = Budget.objects.get(team__slug="vision")
    assert vision.period_start.day == 1 and vision.period_end.day == 1
    assert vision.energy_limit_kwh > 0
