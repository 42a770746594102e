"""Fixtures of the telemetry tests: nodes with agent tokens, agent clients, sample batches."""

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from cluster.models import Node


@pytest.fixture
def agent_node(make_node) -> tuple[Node, str]:
    node = make_node("node-01", gpus=2)
    return node, node.issue_agent_token()


@pytest.fixture
def other_node(make_node) -> tuple[Node, str]:
    node = make_node("node-02", gpus=2)
    return node, node.issue_agent_token()


@pytest.fixture
def agent_client() -> Callable[[str], APIClient]:
    def make(raw_token: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw_token}")
        return client

    return make
