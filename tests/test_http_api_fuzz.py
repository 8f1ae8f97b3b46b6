"""Schemathesis, driven by the API's own OpenAPI document against a real server process,
with a token of every scope: no server error and no answer outside the document."""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from notifications.services import tokens

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("scopes", [["schedule"], ["read"], ["manage"], ["schedule", "read", "manage"]])
def test_every_operation_answers_within_its_document(live_server, scopes):
    token = tokens.create("fuzz", scopes)[1]
    document = requests.get(f"{live_server.url}/notifications/api/v1/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(document)
    failures, calls = [], []
    for operation in schema.get_all_operations():
        api_operation = operation.ok()

        @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=api_operation.as_strategy())
        def run(case):
            answer = case.call(base_url=live_server.url, headers={"Authorization": f"Bearer {token}"})
            calls.append(answer.status_code)
            case.validate_response(answer, checks=CHECKS)

        try:
            run()
        except Exception as exc:
            failures.append(f"{api_operation.method.upper()} {api_operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)
    assert len(calls) >= len(document["paths"])  # every operation was called
