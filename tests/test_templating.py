"""Notification templates: plain text unescaped, a restricted engine, bounded work.

Subjects and bodies are Django templates rendered with the row's payload by
`notifications.content.templating`. These tests cover what a template may do (the allow-list),
what it may not (each attack of issue 9), where a refusal shows up (a ValidationError at
save, a permanent email failure at send) and that no message quotes the payload.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.template import defaultfilters, defaulttags
from django.templatetags import i18n
from django.urls import reverse

from notifications.api import run_tick, schedule
from notifications.content import templating
from notifications.content.templating import TemplateRenderError, render, template_errors
from notifications.models import Notification

NOW = datetime(2025, 1, 15, 12, 2, tzinfo=UTC)
DUE = NOW - timedelta(minutes=1)
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello", "timezone": "UTC"}
SECRET = "s3cr3t-token-4711"
TRIPLE_LOOP = "{% for a in l %}{% for b in l %}{% for c in l %}{{ c }}{% endfor %}{% endfor %}{% endfor %}"

# Templates refused when parsed: (case id, template, words the message must hold).
REFUSED = [
    ("lorem", "{% lorem 2000000 w %}", "{% lorem %}"),
    ("url", '{% url "admin:index" %}', "{% url %}"),
    ("debug", "{% debug %}", "{% debug %}"),
    ("include relative", '{% include "./x" %}', "{% include %}"),
    ("include", '{% include "admin/base.html" %}', "{% include %}"),
    ("extends", '{% extends "admin/base.html" %}', "{% extends %}"),
    ("load", "{% load static %}", "{% load %}"),
    ("csrf_token", "{% csrf_token %}", "{% csrf_token %}"),
    ("refused tag inside an if", '{% if x %}{% url "admin:index" %}{% endif %}', "{% url %}"),
    ("dictsort calls methods", "{{ rows|dictsort:'name' }}", "|dictsort"),
    ("pprint", "{{ payload|pprint }}", "|pprint"),
    ("unknown filter", "{{ name|nosuchfilter }}", "|nosuchfilter"),
    ("ljust 300000000", '{{ x|ljust:"300000000" }}', "|ljust may be at most 1,000"),
    ("rjust as a number", "{{ x|rjust:300000000 }}", "|rjust may be at most 1,000"),
    ("center in a with", '{% with y=x|center:"99999" %}{{ y }}{% endwith %}', "|center may be at most 1,000"),
    ("floatformat places", '{{ x|floatformat:"300000000" }}', "|floatformat may be at most 1,000"),
    ("stringformat width", '{{ x|stringformat:"0300000000d" }}', "|stringformat may be at most 1,000"),
    ("wordwrap in a filter tag", '{% filter wordwrap:"5000" %}x{% endfilter %}', "|wordwrap may be at most 1,000"),
]
REFUSED_IDS = [case[0] for case in REFUSED]


def reload(row: Notification) -> Notification | None:
    return Notification.objects.filter(pk=row.pk).first()


def render_error(text: str, payload: dict) -> str:
    with pytest.raises(TemplateRenderError) as info:
        render(text, payload)
    return str(info.value)


# --- item 3: plain text is not escaped --------------------------------------------------------


@pytest.mark.django_db
def test_plain_text_email_arrives_unescaped(make_row):
    make_row(
        subject="{{ dish }} <tonight>",
        body="Menu: {{ dish }}\nOrder: {{ link }}\n{{ quote }}",
        payload={"dish": "Fish & Chips", "link": "https://example.com/order?a=1&b=2", "quote": '"<Ada\'s>"'},
        fire_at=DUE,
    )

    run_tick(now=NOW)

    [message] = mail.outbox
    assert message.subject == "Fish & Chips <tonight>"
    assert message.body == 'Menu: Fish & Chips\nOrder: https://example.com/order?a=1&b=2\n"<Ada\'s>"'


def test_autoescape_true_escapes_for_html():
    payload = {"name": "<b>Fish & Chips</b>", "trusted": "<i>ok</i>"}

    html = render("<p>{{ name }}</p>{{ trusted|safe }}", payload, autoescape=True)
    text = render("<p>{{ name }}</p>{{ trusted|safe }}", payload)

    assert html == "<p>&lt;b&gt;Fish &amp; Chips&lt;/b&gt;</p><i>ok</i>"
    assert text == "<p><b>Fish & Chips</b></p><i>ok</i>"


def test_text_without_a_brace_is_returned_as_is():
    text = "Fish & Chips, 100% fresh <today>"
    assert render(text, {}) is text
    assert template_errors(text) == []


# --- the allow-list -------------------------------------------------------------------------


def test_engine_loads_only_the_allow_list():
    engine = templating.engine()

    [library] = engine.template_builtins
    assert templating.RestrictedEngine.default_builtins == []
    assert engine.template_libraries == {}
    # The allow-list, the translation tags, and a `load` that takes only i18n.
    assert sorted(library.tags) == sorted([*templating.ALLOWED_TAGS, *templating.I18N_TAGS, "load"])
    assert sorted(library.filters) == sorted(templating.ALLOWED_FILTERS)
    # Every name on the lists is one of Django's own (on every supported Django version).
    assert set(templating.ALLOWED_TAGS) <= set(defaulttags.register.tags)
    assert set(templating.I18N_TAGS) <= set(i18n.register.tags)
    assert set(templating.ALLOWED_FILTERS) <= set(defaultfilters.register.filters)


def test_a_reminder_using_the_allowed_tags_and_filters_renders():
    text = (
        "{% autoescape off %}{% comment %}note{% endcomment %}"
        "Hello {{ name|default:'there'|title }},\n"
        "{% for item in items %}{% ifchanged item.kind %}[{{ item.kind|upper }}]\n{% endifchanged %}"
        "{{ forloop.counter }}. {{ item.label|truncatewords:3 }} {{ item.price|floatformat:2 }}"
        "{% cycle ' (odd)' ' (even)' %}\n{% empty %}nothing\n{% endfor %}"
        "{% with n=items|length %}{{ n }} item{{ n|pluralize }}{% endwith %}, "
        "{% firstof missing 'fallback' %}, {{ tags|join:', ' }}, {{ code|ljust:'6' }}|, "
        "{% for key, value in extra.items %}{{ key }}={{ value }} {% endfor %}"
        "{% if items|length > 1 and name %}many{% else %}few{% endif %} "
        "{% templatetag openvariable %}{% verbatim %}{{ raw }}{% endverbatim %}{% endautoescape %}"
    )
    payload = {
        "name": "ada lovelace",
        "items": [
            {"kind": "book", "label": "Notes on the Analytical Engine", "price": 12.5},
            {"kind": "book", "label": "Sketch", "price": 3},
            {"kind": "tea", "label": "Earl Grey", "price": 4.125},
        ],
        "tags": ["a", "b"],
        "code": "X1",
        "extra": {"k": "v"},
    }

    assert render(text, payload) == (
        "Hello Ada Lovelace,\n"
        "[BOOK]\n1. Notes on the … 12.50 (odd)\n2. Sketch 3.00 (even)\n"
        "[TEA]\n3. Earl Grey 4.13 (odd)\n"
        "3 items, fallback, a, b, X1    |, k=v many {{{{ raw }}"
    )


def test_values_are_looked_up_by_key_and_index_never_called():
    payload = {"name": "ada", "items": [1, 2, 3], "obj": {"items": "own key first"}}

    out = render("{{ name.upper }}|{{ items.clear }}|{{ items.0 }}|{{ name.1 }}|{{ obj.items }}", payload)

    assert out == "||1|d|own key first"
    assert payload["items"] == [1, 2, 3]  # list.clear was not called


def test_names_a_template_stores_do_not_reach_the_payload():
    payload = {"name": "Ada"}

    render('{% now "Y" as year %}{% cycle "a" "b" as letter %}{{ year }}{{ letter }}', payload)

    assert payload == {"name": "Ada"}  # the webhook sends the payload unchanged


# --- refused at save ------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "text", "words"), REFUSED, ids=REFUSED_IDS)
def test_template_errors_names_the_refused_tag_or_filter(case, text, words):
    [message] = template_errors(text)
    assert message.startswith("Template error: ")
    assert words in message


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["subject", "body"])
@pytest.mark.parametrize(("case", "text", "words"), REFUSED, ids=REFUSED_IDS)
def test_schedule_refuses_with_a_validation_error_on_the_field(field, case, text, words):
    with pytest.raises(ValidationError) as info:
        schedule(**{**EMAIL, field: text})

    assert list(info.value.error_dict) == [field]
    assert words in " ".join(info.value.message_dict[field])
    assert not Notification.objects.exists()


@pytest.mark.django_db
def test_admin_add_form_shows_the_include_error_instead_of_a_500(admin_client):
    response = admin_client.post(
        reverse("admin:notifications_notification_add"),
        {
            "channels": ["email"],
            "email_to": "ada@example.com",
            "subject": "Hi",
            "body": '{% include "./x" %}',
            "payload": "{}",
            "timezone": "UTC",
            "recurrence_rule": "",
            "next_fire_at_0": "",
            "next_fire_at_1": "",
        },
    )

    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["body"]
    assert "{% include %}" in errors["body"][0]
    assert not Notification.objects.exists()


@pytest.mark.parametrize(
    "text",
    ["{% if %}", "{{ }}", "{% for %}", "{% endif %}", "{{ x|ljust }}", "{% now %}", "{{ _secret }}", "{% with %}"],
)
def test_template_errors_never_raises(text):
    [message] = template_errors(text)
    assert message.startswith("Template error: ")


def test_template_longer_than_the_limit_is_refused():
    text = "{{ name }}" + "x" * templating.MAX_TEMPLATE_CHARS
    assert template_errors(text) == [
        f"Template error: The template is longer than {templating.MAX_TEMPLATE_CHARS:,} characters."
    ]


# --- limits reached at render time -------------------------------------------------------------


def test_width_from_the_payload_fails_before_allocating():
    assert template_errors("{{ x|ljust:width }}") == []
    message = render_error("{{ x|ljust:width }}", {"x": "a", "width": 300_000_000})
    assert message == "The argument of |ljust may be at most 1,000 in notification templates."


@pytest.fixture
def no_clock(monkeypatch):
    """The iteration and size budgets on their own: a loaded machine must not reach the
    render time limit first (which refuses the same template, under another name)."""
    monkeypatch.setattr(templating, "MAX_RENDER_SECONDS", 600.0)


def test_triple_loop_over_2000_items_stops_at_the_iteration_budget(no_clock):
    message = render_error(TRIPLE_LOOP, {"l": list(range(2000))})

    assert message == "loops ran past the limit of 10,000 iterations"


def test_the_budget_is_shared_by_all_loops_of_a_render(no_clock):
    text = "{% for a in l %}{% endfor %}" * 11
    assert render(text[: len(text) // 11 * 10], {"l": list(range(1000))}) == ""  # 10,000 iterations: fine
    assert render_error(text, {"l": list(range(1000))}) == "loops ran past the limit of 10,000 iterations"


def test_values_doubled_in_nested_withs_stop_at_the_size_limit():
    text = "{% with a=x|add:x %}{% with b=a|add:a %}{% with c=b|add:b %}{% with d=c|add:c %}{{ d|length }}"
    text += "{% endwith %}" * 4

    message = render_error(text, {"x": "y" * 5_000})

    assert message == "the value made by |add is longer than 65,536 characters"


@pytest.mark.parametrize(
    ("text", "payload", "message"),
    [
        ("{{ l|join:sep }}", {"l": ["a"] * 1000, "sep": "-" * 1000}, "|join would make a value longer than 65,536"),
        ("{{ big }}", {"big": {"k": ["v"] * 70_000}}, "a variable is longer than 65,536 characters"),
        ("{{ lines|linebreaksbr }}", {"lines": "\n" * 20_000}, "the value made by |linebreaksbr is longer than"),
        ("{% for i in l %}{{ big }}{% endfor %}", {"l": [1] * 3, "big": "x" * 30_000}, "a loop made more than"),
        ("{{ a }}{{ a }}{{ a }}", {"a": "x" * 30_000}, "the result is longer than 65,536 characters"),
    ],
    ids=["join", "variable", "linebreaksbr", "loop output", "result"],
)
def test_output_limits(text, payload, message):
    assert render_error(text, payload).startswith(message)


def test_a_limit_hit_inside_an_if_still_fails_the_render():
    # Django's `if` turns any exception of a comparison into False; the limit is not forgotten.
    message = render_error('{% if x|ljust:w == "a" %}yes{% endif %}no', {"x": "a", "w": 10**8})
    assert message == "The argument of |ljust may be at most 1,000 in notification templates."


def test_render_time_limit(monkeypatch):
    monkeypatch.setattr(templating, "MAX_RENDER_SECONDS", 0)
    assert render_error("{{ name }}", {"name": "Ada"}) == "rendering took longer than 0s"


def test_errors_never_quote_the_payload():
    message = render_error("{{ token|divisibleby:2 }}", {"token": SECRET})  # int(SECRET) fails

    assert message == "ValueError in a tag or filter"
    assert SECRET not in message


# --- at send time: a permanent failure of the email channel ------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "last_error"),
    [
        (
            {"body": "{{ x|ljust:width }}", "payload": {"x": SECRET, "width": 300_000_000}},
            "email: template error: The argument of |ljust may be at most 1,000 in notification templates.",
        ),
        (
            {
                "subject": TRIPLE_LOOP,
                "payload": {"l": list(range(2000)), "token": SECRET},
            },
            "email: template error: loops ran past the limit of 10,000 iterations",
        ),
        (
            {"body": "{{ token|divisibleby:2 }}", "payload": {"token": SECRET}},
            "email: template error: ValueError in a tag or filter",
        ),
    ],
    ids=["ljust", "loops", "filter-raises"],
)
def test_render_failure_at_send_dead_letters_the_row_and_the_tick_goes_on(fields, last_error, no_clock):
    # `bulk_create` skips validation, as raw SQL would; these fail only with their payload anyway.
    bad, good = Notification.objects.bulk_create(
        [
            Notification(**{**EMAIL, **fields}, next_fire_at=DUE - timedelta(hours=1)),
            Notification(**EMAIL, payload={}, next_fire_at=DUE),
        ]
    )
    if bad.pk is None:  # backends that do not return ids from bulk_create
        bad, good = Notification.objects.order_by("next_fire_at")

    report = run_tick(now=NOW)

    bad = reload(bad)
    assert bad.last_error == last_error
    assert SECRET not in bad.last_error
    assert (bad.dead_lettered_at, bad.next_fire_at) == (NOW, None)  # permanent: no retry
    assert reload(good) is None  # the row behind it was delivered in the same tick
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert (report.counts()["succeeded"], report.counts()["dead_lettered"]) == (1, 1)


@pytest.mark.django_db
def test_bulk_created_row_with_a_refused_tag_is_dead_lettered_as_invalid():
    [row] = Notification.objects.bulk_create(
        [Notification(**{**EMAIL, "body": '{% include "./x" %}'}, next_fire_at=DUE)]
    )
    if row.pk is None:
        row = Notification.objects.get()

    run_tick(now=NOW)

    row = reload(row)
    assert row.last_error.startswith("invalid: body: Template error: The tag {% include %} on line 1 is not available")
    assert row.dead_lettered_at == NOW
    assert mail.outbox == []
