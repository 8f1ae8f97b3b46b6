"""The admin's edit form: the same rules as `schedule()`, and a write-only signing secret."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.translation import gettext_lazy as _

from notifications import services
from notifications.channels import registry
from notifications.models import USER_FIELDS, Notification, Routing
from notifications.models.validation import max_payload_depth, payload_too_deep, text_errors

if TYPE_CHECKING:  # django-stubs makes ModelForm generic; at run time it is not
    ModelForm = forms.ModelForm[Notification]
else:
    ModelForm = forms.ModelForm

SECRET_FIELD = "webhook_secret"  # noqa: S105 - a field name, not a secret


class CheckedJSONField(forms.JSONField):
    """JSON text; what Django's field would raise on is an error on the field instead.

    Django's JSON decoding and the model field's own check are recursive: posted JSON
    nested a few hundred levels deep would end in RecursionError (a 500), and an integer
    past Python's 4,300 digits in ValueError, instead of an error on the field. Nesting
    past `max_payload_depth()` is refused before anything recurses.
    """

    unreadable_message = _("Give only JSON values: %(reason)s.")
    too_deep_message = _("This is nested deeper than %(depth)d levels.")

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
            too_deep = payload_too_deep(converted)
        except RecursionError:
            too_deep = True
        except ValueError as exc:  # not JSONDecodeError: an integer past Python's 4,300 digits
            raise ValidationError(self.unreadable_message, code="invalid", params={"reason": exc}) from None
        if too_deep:
            raise ValidationError(self.too_deep_message, code="invalid", params={"depth": max_payload_depth()})
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        """What an error re-render shows: too deep to encode again, it is shown back as typed."""
        value = data
        try:
            value = super().bound_data(data, initial)
            too_deep = payload_too_deep(value)
        except (RecursionError, ValueError):  # too deep, or an integer Python will not read
            too_deep = True
        # Too deep to encode again, or holding text a page cannot carry (an unpaired
        # surrogate): shown back as typed.
        if (too_deep or text_errors(value)) and isinstance(data, str):
            return forms.fields.InvalidJSONInput(data)
        return value


class PayloadField(CheckedJSONField):
    """The payload as JSON text (see `CheckedJSONField`)."""

    unreadable_message = _("The payload must hold only JSON values: %(reason)s.")
    too_deep_message = _("The payload is nested deeper than %(depth)d levels.")


class OptionalJSONField(CheckedJSONField):
    """A JSON value that may be left out: an empty box, not the word `null`, when there is none."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


class HeadersField(CheckedJSONField):
    """Extra headers as a JSON object; an empty box is none (`{}`)."""

    def to_python(self, value: Any) -> Any:
        converted = super().to_python(value)
        return {} if converted is None else converted


class NotificationForm(ModelForm):
    """Edits a row; `Notification.clean()` (the rules of `schedule()`) validates the result.

    The signing secret is write-only: the field never renders the stored value, a blank
    submission keeps it, a new value rotates it and `clear_webhook_secret` removes it.
    The due time follows `services.edit` (the admin saves through it): a blank one on a
    new row is filled in like `schedule()` does, and changing the rule or time zone without
    touching the due time moves it to the new rule's next occurrence, so an old due time
    never fires under a new rule. The form tries the edit (a dry run) to report its errors.
    """

    edited_at: datetime | None = None  # the instant the edit was tried at, and is saved at

    channels = forms.MultipleChoiceField(
        choices=[],  # the registered channels, read per form (`__init__`)
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Where each firing goes."),
    )
    routing = forms.ChoiceField(
        choices=Routing.choices,
        required=False,  # blank: every channel, as schedule() does
        help_text=_("all: every channel at once; first: the channels in order, until one succeeds."),
    )
    webhook_url = forms.URLField(label=_("Webhook URL"), max_length=2000, required=False, assume_scheme="https")
    webhook_secret = forms.CharField(
        label=_("Webhook secret"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    clear_webhook_secret = forms.BooleanField(
        label=_("Remove the row's secret"),
        required=False,
        help_text=_("Sign with the site's NOTIFICATIONS_WEBHOOK_SECRET instead."),
    )

    # The row's `updated_at` when the page was loaded: an edit of a row a tick fired or someone
    # else saved since then is refused (`services.edit`), not saved over what happened.
    version = forms.CharField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = Notification
        fields = [*USER_FIELDS, "next_fire_at"]
        field_classes = {"payload": PayloadField, "backoff": OptionalJSONField, "headers": HeadersField}

    def clean_routing(self) -> str:
        return self.cleaned_data.get("routing") or Routing.ALL

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Help texts are plain text (`Billing <billing@example.com>`, `<prefix>/subject.txt`):
        # the admin prints them as HTML, which would eat what looks like a tag.
        for field in self.fields.values():
            field.help_text = conditional_escape(field.help_text)
        channels = self.fields["channels"]
        assert isinstance(channels, forms.MultipleChoiceField)
        channels.choices = [(c, c) for c in registry.names()]
        # The stored secret must not reach the page, not even as an initial value.
        self.initial.pop(SECRET_FIELD, None)
        self.has_secret = bool(self.instance.pk and self.instance.webhook_secret)
        secret = self.fields[SECRET_FIELD]
        if self.instance.pk:
            secret.label = _("New webhook secret")  # the change page shows "set" / "not set" above it
        if self.has_secret:
            secret.help_text = _(
                "A secret is set and is never shown. Leave blank to keep it; enter a new one to rotate it."
            )
        else:
            secret.help_text = _(
                "No secret of its own: signed with the site's NOTIFICATIONS_WEBHOOK_SECRET. "
                "whsec_ + base64 of at least 24 bytes."
            )
            self.fields.pop("clear_webhook_secret")
        # A form that leaves the priority out (a host's own, or an API client's) means normal.
        priority = self.fields.get("priority")
        if priority is not None:
            priority.required = False
        if self.instance.pk and self.instance.updated_at:
            self.fields["version"].initial = self.instance.updated_at.isoformat()
        if not self.instance.pk:
            self.fields["next_fire_at"].help_text = _(
                "Blank: now for a one-shot row, the rule's next occurrence for a recurring one."
            )

    def clean_priority(self) -> str:
        return str(self.cleaned_data.get("priority") or "normal")

    def clean_version(self) -> datetime | None:
        """The loaded row's `updated_at`; None when the form did not carry it (no check)."""
        value = self.cleaned_data.get("version") or ""
        try:
            version = datetime.fromisoformat(value) if value else None
        except ValueError:
            raise ValidationError(_("Reload the page: its version mark is damaged.")) from None
        return version if version is None or timezone.is_aware(version) else None

    def clean_webhook_secret(self) -> str:
        new = self.cleaned_data.get(SECRET_FIELD) or ""
        if new:
            return new
        return self.instance.webhook_secret if self.has_secret else ""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        if data.get("clear_webhook_secret") and not self.data.get(self.add_prefix(SECRET_FIELD)):
            data[SECRET_FIELD] = ""
        return data

    def _post_clean(self) -> None:
        # Django's own hook after clean() (UserCreationForm overrides it too); the stubs omit it.
        super()._post_clean()  # type: ignore[misc]  # the instance now holds the posted values, validated
        if "recurrence_rule" in self.errors or "timezone" in self.errors:
            return  # a rule that cannot be read has its error already
        self.edited_at = timezone.now()
        try:
            services.edit(
                self.instance,
                self.cleaned_data,
                changed=self.changed_data,
                now=self.edited_at,
                dry_run=True,
                version=self.cleaned_data.get("version"),
            )
        except ValidationError as exc:
            self.add_error(None, exc)
