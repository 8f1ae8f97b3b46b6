"""The HTTP API (SPEC version 5): other services schedule, read and manage notifications.

Built on django-ninja, an optional extra (`pip install ".[api]"`): the request and
response schemas are pydantic models and type hints that ninja both validates requests
with and turns into the OpenAPI 3.1 document (`api/v1/openapi.json`), so the document
cannot drift from what the endpoints accept and answer. It is a small library on top of
plain Django views (no second request/response stack, as Django REST framework plus
drf-spectacular would bring, whose document is derived afterwards from serializers).
The schemas only say a field's JSON type; every rule of a row is `schedule()`'s and
`schedule_many()`'s, called as they are (`notifications.services`), never copied here.

- `problems`: RFC 9457 problem details, the only shape of an error.
- `schemas`: what a request holds and what an answer says.
- `auth`: bearer tokens and their scopes (`notifications.services.tokens`).
- `guard`: what happens before ninja reads a request: the body's size and type,
  `Idempotency-Key`, and `Cache-Control: no-store` on the way out.
- `idempotency`: the first answer to a POST, kept per token and key in the database.
- `endpoints`: the `NinjaAPI` and its operations.
- `urls`: the URLconf `notifications.urls` includes at `api/v1/` when ninja is installed.
"""
