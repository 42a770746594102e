"""The OpenAPI schema, told as the API behaves (drf-spectacular's AutoSchema, refined).

drf-spectacular documents what a view declares; three things it cannot see are added here, for
every operation alike, so that generated clients and the schemathesis run in
``tests/api/test_fuzz_schemathesis.py`` can hold the server to the schema:

- **Who may call.** A view that lets anyone in (no permission classes, or only ``AllowAny``,
  such as ``POST /api/auth-token/``) has no security requirement.
- **What can be null.** A read-only field whose source walks through a nullable model field
  (``Job.current_allocation`` of a queued job, ``EnergyLedgerEntry.team`` of idle energy) is
  ``nullable`` in responses, whether or not its serializer field says ``allow_null``.
- **The errors.** 400 (invalid body, filter or page), 401 (no or bad credentials), 403 (not
  allowed), 404 (no such object, or a page past the end), 415 (a body that is not JSON) and
  429 (throttled) are documented where they can happen, with the one error body DRF sends
  (:data:`API_ERROR_SCHEMA`). Responses a view already documents keep their schema; those it
  documents by description only get the error body.

Request bodies are documented as JSON only (``PARSER_WHITELIST`` in settings): the views also
parse forms, but listing three content types made generated clients send a multipart body
with a JSON header.
"""

from __future__ import annotations

from django.core.exceptions import FieldDoesNotExist
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework import permissions

API_ERROR_COMPONENT = "ApiError"
API_ERROR_SCHEMA = {
    "type": "object",
    "description": (
        "An error. `detail` says what is wrong with the request as a whole (credentials, "
        "permission, not found, malformed body, throttling); otherwise each invalid field "
        "(or `non_field_errors`) maps to its messages, nested like the request body."
    ),
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": {},
}

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

_DESCRIPTIONS = {
    "400": "Invalid input: per-field messages; nothing was stored.",
    "401": "No credentials, or credentials that are not valid.",
    "403": "Authenticated, but not allowed to do this (role, team, node or CSRF).",
    "404": "No such object visible to you, or a page past the end.",
    "415": "The body is not JSON.",
    "429": "Too many requests; retry after the time in `Retry-After`.",
}


def source_may_be_null(field) -> bool:
    """Whether a serializer field's value can be None because its source passes through a
    nullable model field (``current_allocation``, ``team`` of a ledger row, ``owner.x`` where
    owner is nullable ...). Reverse relations and non-model sources say no."""
    parent = getattr(field, "parent", None)
    model = getattr(getattr(parent, "Meta", None), "model", None)
    if model is None or getattr(field, "source", None) in (None, "*"):
        return False
    for attr in field.source_attrs:
        try:
            model_field = model._meta.get_field(attr)
        except FieldDoesNotExist:
            return False
        if not model_field.concrete:
            return False
        if model_field.null:
            return True
        if not model_field.is_relation or model_field.related_model is None:
            return False
        model = model_field.related_model
    return False


class WattflowAutoSchema(AutoSchema):
    def _is_public(self) -> bool:
        return all(isinstance(p, permissions.AllowAny) for p in self.view.get_permissions())

    def get_auth(self):
        if self._is_public():
            return []
        return super().get_auth()

    def _get_serializer_field_meta(self, field, direction):
        meta = super()._get_serializer_field_meta(field, direction)
        if (
            direction == "response"
            and not meta.get("nullable")
            and getattr(field, "read_only", False)
            and source_may_be_null(field)
        ):
            meta["nullable"] = True
        return meta

    def _insert_min_max(self, field, content) -> None:
        super()._insert_min_max(field, content)
        # A bound the field's value may not reach (``StoredWattsField``: 0.5 W is stored as
        # 0 W, below a 1 W floor), as OpenAPI 3.0 says it.
        if getattr(field, "exclusive_minimum", False):
            content["exclusiveMinimum"] = True
        if getattr(field, "exclusive_maximum", False):
            content["exclusiveMaximum"] = True

    def _error_codes(self) -> list[str]:
        codes = []
        has_body = self.method in _BODY_METHODS and self.get_request_serializer() is not None
        has_filters = self.method == "GET" and bool(self._get_filter_parameters())
        paginated = self.method == "GET" and self._is_list_view() and self._get_paginator()
        if has_body or has_filters or paginated:  # a malformed page is a 400 too
            codes.append("400")
        if self.view.get_authenticators():
            # Even a public view refuses credentials that are not valid (401), and a signed-in
            # browser session without its CSRF token (403).
            codes += ["401", "403"]
        if "{" in self.path or paginated:
            codes.append("404")
        if has_body:
            codes.append("415")
        if self.view.get_throttles():
            codes.append("429")
        return codes

    def _api_error_ref(self) -> dict:
        component = ResolvedComponent(
            name=API_ERROR_COMPONENT,
            type=ResolvedComponent.SCHEMA,
            object=API_ERROR_COMPONENT,
            schema=API_ERROR_SCHEMA,
        )
        self.registry.register_on_missing(component)
        return component.ref

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        content = {"application/json": {"schema": self._api_error_ref()}}
        for code in self._error_codes():
            responses.setdefault(code, {"description": _DESCRIPTIONS[code]})
        for code, response in responses.items():
            if code.startswith("4") and "content" not in response:
                response["content"] = content
        return dict(sorted(responses.items()))
