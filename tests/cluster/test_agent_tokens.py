"""Agent tokens: only a hash is stored, lookups find the node, re-issuing revokes."""

import hashlib

from cluster.models import Node, hash_agent_token


def test_issued_token_is_stored_only_as_its_sha256(make_node):
    node = make_node()

    raw = node.issue_agent_token()

    stored = Node.objects.get(pk=node.pk)
    assert stored.agent_token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in stored.agent_token_hash
    assert len(raw) >= 43  # 32 random bytes, base64url
    assert stored.agent_token_issued_at is not None
    assert not Node.objects.filter(agent_token_hash=raw).exists()


def test_a_token_passes_as_a_command_line_argument_whatever_its_random_part(make_node):
    # a token beginning with "-" (1 in 64 of bare base64url ones) made the agent's
    # `--token TOKEN` an option with no value: its e2e test failed now and then
    node = make_node(gpus=0)
    tokens = [node.issue_agent_token() for _ in range(300)]
    assert all(t.startswith("wfa_") for t in tokens)
    assert node.has_agent_token(tokens[-1]) and not node.has_agent_token(tokens[0])


def test_lookup_finds_the_node_and_rejects_others(make_node):
    first, second = make_node("node-01", gpus=0), make_node("node-02", gpus=0)
    token_first, token_second = first.issue_agent_token(), second.issue_agent_token()

    assert Node.for_agent_token(token_first) == first
    assert Node.for_agent_token(token_second) == second
    assert Node.for_agent_token("not-a-token") is None
    assert Node.for_agent_token("") is None
    assert first.has_agent_token(token_first)
    assert not first.has_agent_token(token_second)


def test_reissuing_revokes_the_old_token(make_node):
    node = make_node(gpus=0)
    old = node.issue_agent_token()

    new = node.issue_agent_token()

    assert old != new
    assert Node.for_agent_token(old) is None
    assert Node.for_agent_token(new) == node


def test_node_without_token_matches_nothing(make_node):
    node = make_node(gpus=0)

    assert node.agent_token_hash == ""
    assert not node.has_agent_token("")
    assert Node.for_agent_token(hash_agent_token("")) is None
