"""The HTTP API's records: `ApiToken` (who may call it, and for what) and `IdempotencyRecord`
(the first answer to a POST sent with an `Idempotency-Key`)."""

from __future__ import annotations

from datetime import timedelta

from django.db import models

# What a token may do (SPEC: the HTTP API): create rows, read them, act on them.
SCOPES = ("schedule", "read", "manage")
# How long an Idempotency-Key's first answer is replayed; the tick's housekeeping prunes older records.
IDEMPOTENCY_RETENTION = timedelta(hours=24)


class ApiToken(models.Model):
    """A bearer token of the HTTP API. Only the SHA-256 of the token is stored: a token is
    32 random bytes, so a fast hash is enough (nothing to guess from it), and a stolen
    table holds no usable credential. `revoked_at` set: refused at once, on every host."""

    name = models.CharField(max_length=100, unique=True)
    scopes = models.JSONField(default=list, help_text="Any of schedule, read, manage.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "API token"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class IdempotencyRecord(models.Model):
    """A POST's `Idempotency-Key` for one token: the body's hash, and once answered the
    status and body to replay. `status` null: a request is in progress under the key
    until `leased_until`; after that a repeat may take the key over (`attempt` + 1), and
    only the request holding the current `attempt` may store an answer. Records older
    than `IDEMPOTENCY_RETENTION` are pruned by the tick's housekeeping."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True)
    content_type = models.CharField(max_length=100, blank=True)
    response = models.BinaryField(default=b"")
    created_at = models.DateTimeField(db_index=True)
    # Null on a record from before leases: its request is taken to be gone.
    leased_until = models.DateTimeField(null=True)
    attempt = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "key"], name="notifications_idempotency_key")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status or 'in progress'})"
