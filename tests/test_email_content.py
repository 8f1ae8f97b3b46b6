"""Email, version 2, from the row's side: recipients, bodies, template prefixes, language.

Validation at schedule time (every address, the template files found through the site's
loaders, a known language), rendering at send time (locmem), and the migration that
lets `email_to` hold a list.
"""

from __future__ import annotations

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.content import email as email_content
from notifications.models import Notification
from notifications.models.addresses import MAX_RECIPIENTS, AddressesFormField

NOW = timezone.now().replace(microsecond=0)


def email(**fields):
    fields.setdefault("channels", ["email"])
    fields.setdefault("email_to", "ada@example.com")
    if not fields.get("template"):
        fields.setdefault("subject", "Reminder")
        fields.setdefault("body", "Hello")
    return schedule(fire_at=NOW, **fields)


def refused(**fields) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        email(**fields)
    return caught.value.message_dict


# --- recipients -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_email_to_keeps_one_address_as_a_string_and_several_as_a_list():
    one = email(email_to="ada@example.com")
    several = email(email_to=["ada@example.com", "grace@example.com"])

    assert Notification.objects.get(pk=one.pk).email_to == "ada@example.com"
    assert Notification.objects.get(pk=several.pk).email_to == ["ada@example.com", "grace@example.com"]
    assert Notification.objects.get(pk=one.pk).email_cc == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"email_to": "not an address"}, "email_to", "Enter a valid email address: 'not an address'."),
        ({"email_to": ["ada@example.com", "x@"]}, "email_to", "Enter a valid email address: 'x@'."),
        ({"email_to": []}, "email_to", "The email channel needs a recipient."),
        (
            {"email_cc": ["ok@example.com", "bad", "worse@"]},
            "email_cc",
            "Enter valid email addresses: 'bad', 'worse@'.",
        ),
        ({"email_bcc": "audit@example.com"}, "email_bcc", 'Give a list of addresses, e.g. ["ada@example.com"].'),
        ({"reply_to": [7]}, "reply_to", "Give an address or a list of addresses."),
        ({"email_cc": ["a@example.com", "A@example.com"]}, "email_cc", "Each address may appear only once."),
        (
            {"email_to": [f"u{i}@example.com" for i in range(MAX_RECIPIENTS)], "email_cc": ["one@example.com"]},
            "email_to",
            f"At most {MAX_RECIPIENTS} recipients (To, Cc and Bcc together), not {MAX_RECIPIENTS + 1}.",
        ),
    ],
)
def test_every_address_is_validated(fields, field, message):
    assert refused(**fields) == {field: [message]}


@pytest.mark.django_db
def test_a_webhook_row_ignores_the_email_fields():
    row = schedule(channels=["webhook"], webhook_url="https://hooks.example.com/x", email_cc=["bad"], fire_at=NOW)
    assert row.pk


def test_the_form_field_takes_addresses_separated_by_commas_or_lines():
    single, listed = AddressesFormField(single=True), AddressesFormField(required=False)

    assert single.clean("ada@example.com") == "ada@example.com"
    assert single.clean(" ada@example.com,\n grace@example.com ") == ["ada@example.com", "grace@example.com"]
    assert listed.clean("") == []
    assert listed.clean("linus@example.com; ken@example.com") == ["linus@example.com", "ken@example.com"]
    assert listed.prepare_value(["a@example.com", "b@example.com"]) == "a@example.com, b@example.com"
    assert not listed.has_changed(["a@example.com"], "a@example.com")


# --- bodies -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_html_body_is_checked_like_the_body():
    assert refused(html_body="{% include 'x.html' %}")["html_body"][0].startswith(
        "Template error: The tag {% include %}"
    )


@pytest.mark.django_db
def test_html_body_escapes_the_payload_and_the_text_body_does_not():
    email(body="{{ dish }}", html_body="<p>{{ dish }}</p>", payload={"dish": "Fish & <Chips>"})

    run_tick(now=NOW)

    (message,) = mail.outbox
    assert message.body == "Fish & <Chips>"
    assert message.alternatives[0] == ("<p>Fish &amp; &lt;Chips&gt;</p>", "text/html")


# --- template prefixes ------------------------------------------------------------------------


@pytest.fixture
def site_templates(tmp_path, settings):
    """A template directory of the site's (TEMPLATES[0]["DIRS"]) with reminders/invoice/*."""
    folder = tmp_path / "reminders" / "invoice"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Invoice {{ number }} is due\n")
    (folder / "body.txt").write_text("Hello {{ name }},\ninvoice {{ number }}: {{ total }} {{ paid|yesno }}\n")
    (folder / "body.html").write_text(
        "<p>{% translate 'Yes' %}, {{ name }}: <b>{{ total }}</b></p>{% if urgent %}<p>{{ note|safe }}</p>{% endif %}"
    )
    templates = [{**settings.TEMPLATES[0], "DIRS": [tmp_path, *settings.TEMPLATES[0]["DIRS"]]}]
    settings.TEMPLATES = templates
    return folder


PAYLOAD = {"name": "<Ada>", "number": 7, "total": "12 €", "paid": False, "urgent": True, "note": "<i>trusted</i>"}


@pytest.mark.django_db
def test_a_template_prefix_renders_the_sites_files(site_templates):
    email(template="reminders/invoice", payload=PAYLOAD)

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    (message,) = mail.outbox
    assert message.subject == "Invoice 7 is due"  # one line
    assert message.body == "Hello <Ada>,\ninvoice 7: 12 € no\n"
    assert message.alternatives[0] == ("<p>Yes, &lt;Ada&gt;: <b>12 €</b></p><p><i>trusted</i></p>", "text/html")


@pytest.mark.django_db
def test_language_is_active_while_rendering(site_templates):
    email(template="reminders/invoice", payload=PAYLOAD, language="de")

    run_tick(now=NOW)

    (message,) = mail.outbox
    assert message.body.endswith("12 € Nein\n")  # Django's own German catalog
    assert message.alternatives[0][0].startswith("<p>Ja, &lt;Ada&gt;")


@pytest.mark.django_db
def test_body_html_is_optional(site_templates):
    (site_templates / "body.html").unlink()
    email(template="reminders/invoice", payload=PAYLOAD)

    run_tick(now=NOW)

    (message,) = mail.outbox
    assert message.alternatives == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        (
            {"template": "reminders/missing"},
            {"template": ["No template reminders/missing/subject.txt among the site's templates."]},
        ),
        (
            {"template": "../reminders/invoice"},
            {
                "template": [
                    "Give a template prefix such as reminders/invoice: names of letters, digits, '_', '-' and '.', "
                    "separated by '/'."
                ]
            },
        ),
        (
            {"template": "reminders/invoice", "subject": "Hi", "html_body": "<p>x</p>"},
            {
                "subject": ["Leave this blank: the template's files give the message."],
                "html_body": ["Leave this blank: the template's files give the message."],
            },
        ),
        (
            {"language": "xx-nowhere"},
            {"language": ["Unknown language 'xx-nowhere': use a code from the site's LANGUAGES"]},
        ),
    ],
)
def test_template_and_language_are_validated_at_schedule_time(site_templates, fields, errors):
    found = refused(**fields)
    assert set(found) == set(errors)
    for field, messages in errors.items():
        assert [m[: len(e)] for m, e in zip(found[field], messages, strict=True)] == messages


@pytest.mark.django_db
def test_template_files_render_with_the_sites_own_engine(site_templates):
    """Site files are code: extends, include, load of any library, every tag; the language is active."""
    root = site_templates.parent.parent
    (root / "emails").mkdir()
    (root / "emails" / "base.html").write_text(
        '{% load i18n %}{% get_current_language as LANG %}<html lang="{{ LANG }}">'
        "{% block content %}{% endblock %}{% include 'emails/footer.html' %}</html>"
    )
    (root / "emails" / "footer.html").write_text("{% load static %}<img src=\"{% static 'logo.png' %}\">")
    (site_templates / "body.html").write_text(
        '{% extends "emails/base.html" %}{% block content %}<p>{{ name }}{% lorem 2 w %}</p>{% endblock %}'
    )
    (site_templates / "body.txt").write_text("{% load i18n %}{% get_current_language as LANG %}{{ LANG }}: {{ name }}")
    email(template="reminders/invoice", payload=PAYLOAD, language="de")

    run_tick(now=NOW)

    (message,) = mail.outbox
    assert message.body == "de: <Ada>"  # text: nothing escaped
    assert message.alternatives[0][0] == (
        '<html lang="de"><p>&lt;Ada&gt;lorem ipsum</p><img src="/static/logo.png"></html>'
    )


@pytest.mark.django_db
def test_a_template_file_that_does_not_compile_is_refused_on_save(site_templates):
    (site_templates / "body.txt").write_text("{% load no_such_library %}")

    (message,) = refused(template="reminders/invoice")["template"]
    assert message.startswith("Reminders/invoice/body.txt: ")
    assert "'no_such_library' is not a registered tag library" in message


@pytest.mark.django_db
def test_a_file_a_template_extends_is_named_when_missing(site_templates):
    (site_templates / "body.txt").write_text('{% extends "emails/gone.txt" %}')
    row = email(template="reminders/invoice", payload=PAYLOAD)  # extends is resolved when rendered

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error == "email: template error: no template emails/gone.txt among the site's templates"
    assert row.dead_lettered_at is not None


@pytest.mark.django_db
def test_an_exception_in_a_site_template_is_a_permanent_failure_naming_its_type_only(site_templates):
    (site_templates / "body.txt").write_text("{% url 'no-such-view' a %}")  # NoReverseMatch quotes its arguments
    row = email(template="reminders/invoice", payload={"a": "secret-ish"})

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error == "email: template error: NoReverseMatch while rendering reminders/invoice/body.txt"


@pytest.mark.django_db
def test_row_templates_keep_the_restricted_engine_and_know_the_language():
    refused_include = refused(body='{% include "emails/base.html" %}')["body"][0]
    assert refused_include.startswith("Template error: The tag {% include %}")
    email(body="{% get_current_language as LANG %}{{ LANG }} {% translate 'Yes' %}", language="de")

    run_tick(now=NOW)

    assert mail.outbox[0].body == "de Ja"


@pytest.mark.django_db
def test_a_template_gone_by_send_time_dead_letters_the_row_with_the_reason(site_templates):
    row = email(template="reminders/invoice", payload=PAYLOAD)
    (site_templates / "body.txt").unlink()
    email_content._SIBLINGS.clear()  # a tick in a new process: Django's cached loader starts empty

    report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error == "invalid: template: No template reminders/invoice/body.txt among the site's templates."
    assert mail.outbox == []


# --- the migration ------------------------------------------------------------------------------


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps.get_model("notifications", "Notification")


@pytest.fixture
def at_0005(transactional_db):
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("notifications")
    yield migrate([("notifications", "0005_lifecycle")])
    migrate(latest)


def test_existing_recipients_survive_the_migration_forwards_and_back(at_0005):
    Old = at_0005
    long_address = "a" * 64 + "@" + "b" * 185 + ".com"  # 254 characters: 256 once quoted
    pks = [
        Old.objects.create(channels=["email"], email_to=address).pk for address in ("ada@example.com", long_address, "")
    ]

    New = migrate([("notifications", "0006_email_v2")])

    assert [New.objects.get(pk=pk).email_to for pk in pks] == ["ada@example.com", long_address, ""]
    assert New.objects.get(pk=pks[0]).email_cc == []
    New.objects.filter(pk=pks[0]).update(email_to=["ada@example.com", "grace@example.com"])

    Back = migrate([("notifications", "0005_lifecycle")])

    assert [Back.objects.get(pk=pk).email_to for pk in pks] == ["ada@example.com", long_address, ""]


@pytest.mark.django_db
def test_rows_found_by_recipient_in_the_admin_search():
    email(email_to=["ada@example.com", "grace@example.com"])
    assert Notification.objects.filter(email_to__icontains="GRACE@").count() == 1


@override_settings(LANGUAGES=[("en", "English")])
@pytest.mark.django_db
def test_languages_come_from_the_sites_setting():
    assert refused(language="de") == {"language": ["Unknown language 'de': use a code from the site's LANGUAGES (en)."]}
