"""Notification templates: a restricted Django template engine with bounded work.

A row's `subject`, `body` and `html_body` are Django templates rendered with its `payload`.
They are written by host code and by staff in the admin, so they get less than a site
template (the files a row's `template` names are the site's own code and render with the
site's engine: `notifications.content.email`):

- An allow-list of tags and filters (`ALLOWED_TAGS`, `I18N_TAGS`, `ALLOWED_FILTERS`).
  Nothing that reaches the site (`url`, `include`, `extends`, `load` of anything but
  i18n, `debug`, `csrf_token`), generates text by itself (`lorem`), or calls into code.
- Values are looked up by key and by index only: no method of a payload value is called,
  except `items`, `keys` and `values` of an object (`{% for k, v in d.items %}`).
- Bounds on the work of one render: `MAX_LOOP_ITERATIONS` across all `for` loops,
  `MAX_NUMERIC_ARGUMENT` for the arguments that size a filter's output (`ljust:"20"`),
  `MAX_OUTPUT_CHARS` for every value a filter takes or makes, every variable, each loop's
  output and the whole result, and `MAX_RENDER_SECONDS` as the last resort.

A template that breaks a rule found by parsing is refused when the row is saved
(`template_errors`); one that breaks a limit only with its payload fails when rendered
(`render` raises `TemplateRenderError`). Messages name the rule, never the payload.

This module imports nothing from the app, so validation, the email channel and any later
template field share one engine.
"""

from __future__ import annotations

import contextvars
import functools
import re
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from django.template import TemplateSyntaxError, defaultfilters, defaulttags
from django.template.base import (
    FilterExpression,
    Lexer,
    Node,
    NodeList,
    Parser,
    Template,
    Variable,
    VariableDoesNotExist,
    VariableNode,
    render_value_in_context,
)
from django.template.context import BaseContext, Context
from django.template.engine import Engine
from django.template.library import Library
from django.templatetags import i18n
from django.utils.safestring import SafeString, mark_safe

from notifications.exceptions import NotificationsError

# Tags a notification template may use. Left out on purpose: `url`, `include`, `extends`,
# `block`, `load` (but `{% load i18n %}`), `debug`, `csrf_token`, `querystring` (they reach the site, its files or
# its settings), `lorem` (text without bound), `widthratio`, `regroup` (not needed in a
# reminder; regroup does unbudgeted work per item).
ALLOWED_TAGS: tuple[str, ...] = (
    "autoescape",
    "comment",
    "cycle",
    "filter",
    "firstof",
    "for",
    "if",
    "ifchanged",
    "now",
    "resetcycle",
    "spaceless",
    "templatetag",
    "verbatim",
    "with",
)

# Translation tags, built in (no `{% load i18n %}` needed, though it is accepted): the row's
# `language` is active while its templates render.
I18N_TAGS: tuple[str, ...] = (
    "blocktrans",
    "blocktranslate",
    "trans",
    "translate",
    "get_current_language",
    "get_current_language_bidi",
)

# Filters a notification template may use. Left out on purpose: `dictsort` and
# `dictsortreversed` (they call methods of values), `date`, `time`, `timesince`,
# `timeuntil` (a JSON payload holds no dates), `urlize`, `urlizetrunc`,
# `truncatechars_html`, `truncatewords_html`, `striptags`, `unordered_list`,
# `json_script`, `escapejs` (HTML or JavaScript parsing, not needed in a reminder),
# `pprint`, `random`, `phone2numeric`.
ALLOWED_FILTERS: tuple[str, ...] = (
    "add",
    "addslashes",
    "capfirst",
    "center",
    "cut",
    "default",
    "default_if_none",
    "divisibleby",
    "escape",
    "escapeseq",
    "filesizeformat",
    "first",
    "floatformat",
    "force_escape",
    "get_digit",
    "iriencode",
    "join",
    "last",
    "length",
    "linebreaks",
    "linebreaksbr",
    "linenumbers",
    "ljust",
    "lower",
    "make_list",
    "pluralize",
    "rjust",
    "safe",
    "safeseq",
    "slice",
    "slugify",
    "stringformat",
    "title",
    "truncatechars",
    "truncatewords",
    "upper",
    "urlencode",
    "wordcount",
    "wordwrap",
    "yesno",
)

MAX_TEMPLATE_CHARS = 64 * 1024  # the template text itself
MAX_OUTPUT_CHARS = 64 * 1024  # any value a filter takes or makes, a variable, a loop's output, the result
MAX_LOOP_ITERATIONS = 10_000  # all `for` loops of one render together
MAX_NUMERIC_ARGUMENT = 1_000  # widths and places: ljust, rjust, center, wordwrap, floatformat, stringformat
MAX_RENDER_SECONDS = 1.0  # the last resort: checked at every lookup, filter and loop iteration

# Methods of an object a template may call: views, no copies, no changes.
_MAPPING_VIEWS = frozenset({"items", "keys", "values"})


class TemplateRenderError(NotificationsError):
    """A notification template could not be rendered. The message never holds the payload."""


# --- one render's budget --------------------------------------------------------------------


class _Budget:
    """What one render may still spend. The first limit hit is kept: a later check fails too.

    The `if` tag swallows every exception of its operators (`{% if a|f == b %}`), so a limit
    raised there would otherwise be forgotten; `_Template.render` raises it at the end.
    """

    def __init__(self) -> None:
        self.iterations = 0
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS
        self.failure: str | None = None

    def fail(self, message: str) -> TemplateRenderError:
        if self.failure is None:
            self.failure = message
        return TemplateRenderError(self.failure)

    def check(self) -> None:
        if self.failure is not None:
            raise TemplateRenderError(self.failure)
        if time.monotonic() >= self.deadline:
            raise self.fail(f"rendering took longer than {MAX_RENDER_SECONDS:g}s")

    def iterate(self) -> None:
        self.check()
        self.iterations += 1
        if self.iterations > MAX_LOOP_ITERATIONS:
            raise self.fail(f"loops ran past the limit of {MAX_LOOP_ITERATIONS:,} iterations")


# Filters are called without the context, so the render's budget travels in a context
# variable (one per thread: each render runs in one thread).
_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("notification_template_budget")


def _size(value: Any, stop_above: int = MAX_OUTPUT_CHARS) -> int:
    """About how many characters `value` makes as text: a string its length, a container one
    plus its keys and items, anything else one. Counting stops once past `stop_above`, so a
    huge value costs no more than a big one."""
    size = 0
    stack = [value]
    while stack and size <= stop_above:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, Collection):
            size += 1
            parts = 2 * len(item) if isinstance(item, Mapping) else len(item)
            if size + parts > stop_above:  # every key and item counts at least one
                return size + parts
            stack.extend([*item.keys(), *item.values()] if isinstance(item, Mapping) else item)
        else:
            size += 1
    return size


def _limit_size(value: Any, what: str) -> None:
    if _size(value) > MAX_OUTPUT_CHARS:
        raise _budget.get().fail(f"{what} is longer than {MAX_OUTPUT_CHARS:,} characters")


# --- filters ----------------------------------------------------------------------------------


def _as_int(arg: Any) -> int | None:
    try:
        return int(arg)
    except (TypeError, ValueError, OverflowError):
        return None  # the filter itself copes with (or refuses) an argument that is no number


def _check_number(name: str, number: int | None) -> None:
    if number is not None and abs(number) > MAX_NUMERIC_ARGUMENT:
        raise TemplateSyntaxError(
            f"The argument of |{name} may be at most {MAX_NUMERIC_ARGUMENT:,} in notification templates."
        )


def _check_width(name: str, arg: Any) -> None:
    _check_number(name, _as_int(arg))


def _check_floatformat(name: str, arg: Any) -> None:
    # "2", "-3", "2g", "3u", "2gu": places, then optional grouping and unlocalized flags.
    _check_number(name, _as_int(str(arg).rstrip("gu") or 0))


def _check_stringformat(name: str, arg: Any) -> None:
    # Width and precision of a %-format ("10s", "08.3f"): each number in the spec.
    for digits in re.findall(r"\d+", str(arg)):
        _check_number(name, int(digits) if len(digits) < 8 else MAX_NUMERIC_ARGUMENT + 1)


# Checks of an argument that sizes a filter's output: run when the template is parsed (for a
# literal argument) and again before the filter runs (for a variable one).
_ARGUMENT_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "center": _check_width,
    "ljust": _check_width,
    "rjust": _check_width,
    "wordwrap": _check_width,
    "floatformat": _check_floatformat,
    "stringformat": _check_stringformat,
}


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` with its input, arguments and output held to the limits, and the clock checked."""
    check_argument = _ARGUMENT_CHECKS.get(name)

    @functools.wraps(func)  # keeps is_safe, needs_autoescape and the signature args_check reads
    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget.get()
        budget.check()
        _limit_size(value, f"the value given to |{name}")
        for arg in args:
            _limit_size(arg, f"the argument of |{name}")
            if check_argument is not None:
                try:
                    check_argument(name, arg)
                except TemplateSyntaxError as exc:
                    raise budget.fail(str(exc)) from None
        # |join repeats its separator between items: checked before joining, not after.
        if (
            name == "join"
            and args
            and isinstance(value, Collection)
            and len(str(args[0])) * len(value) > MAX_OUTPUT_CHARS
        ):
            raise budget.fail(f"|join would make a value longer than {MAX_OUTPUT_CHARS:,} characters")
        result = func(value, *args, **kwargs)
        _limit_size(result, f"the value made by |{name}")
        return result

    return bounded


# --- nodes -----------------------------------------------------------------------------------


class _PayloadVariable(Variable):
    """A variable looked up by key and index only: no method of a value is ever called.

    Django's own lookup calls any callable it reaches (`{{ s.upper }}`, `{{ l.clear }}`), which
    would let a template do unbudgeted work or change the payload the webhook sends.
    """

    def _resolve_lookup(self, context: Any) -> Any:
        _budget.get().check()
        current = context
        for bit in self.lookups or ():
            current = _lookup(current, bit)
        return current


def _lookup(current: Any, bit: str) -> Any:
    if isinstance(current, BaseContext | Mapping):
        try:
            return current[bit]
        except (KeyError, TypeError):
            pass
        if isinstance(current, Mapping) and bit in _MAPPING_VIEWS:
            return getattr(current, bit)()
    elif isinstance(current, list | tuple | str):
        index = _as_int(bit)
        if index is not None:
            try:
                return current[index]
            except IndexError:
                pass
    raise VariableDoesNotExist("Failed lookup for key [%s]", (bit,))


class _NodeList(NodeList):
    """Every run of nodes of a notification template (the template's own, and each block's:
    `if`, `with`, ...): the text is counted as each node renders, and the clock checked, so
    13,000 `{{ x }}` of a 60 KB value stop at MAX_OUTPUT_CHARS instead of joining 780 MB."""

    def render(self, context: Context) -> SafeString:
        budget = _budget.get(None)
        parts: list[str] = []
        length = 0
        for node in self:
            text = str(node.render_annotated(context))  # str already; the stubs say int | str
            length += len(text)
            if budget is not None:
                if length > MAX_OUTPUT_CHARS:
                    raise budget.fail(f"the result is longer than {MAX_OUTPUT_CHARS:,} characters")
                budget.check()
            parts.append(text)
        return mark_safe("".join(parts))  # noqa: S308 - as Django's NodeList: its parts are escaped


class _VariableNode(VariableNode):
    """`{{ value }}`: the value and its text held to MAX_OUTPUT_CHARS before they are joined."""

    def render(self, context: Context) -> str:
        try:
            value = self.filter_expression.resolve(context)
        except UnicodeDecodeError:
            return ""  # as Django's VariableNode does
        _limit_size(value, "a variable")  # before str() of a list or an object
        output = render_value_in_context(value, context)
        _limit_size(output, "a variable")
        return output


class _ForNode(defaulttags.ForNode):
    """`{% for %}` that spends the render's iteration budget and caps its own output.

    Django's `ForNode.render`, with a budget check per iteration and a running total of the
    text it has made (a loop collects all its output before joining it).
    """

    def render(self, context: Context) -> str:
        budget = _budget.get()
        parentloop = context.get("forloop", {})
        # Typed loosely by django-stubs; these are what `do_for` builds.
        sequence: FilterExpression = self.sequence  # type: ignore[assignment]
        nodelist_loop: list[Node] = self.nodelist_loop  # type: ignore[assignment]
        nodelist_empty: NodeList = self.nodelist_empty  # type: ignore[assignment]
        with context.push():
            values = sequence.resolve(context, ignore_failures=True)
            if values is None:
                values = []
            if not hasattr(values, "__len__"):
                values = list(values)
            len_values = len(values)
            if len_values < 1:
                return nodelist_empty.render(context)
            if self.is_reversed:
                values = reversed(values)
            unpack = len(self.loopvars) > 1
            loop_dict = context["forloop"] = {"parentloop": parentloop}
            output: list[str] = []
            length = 0
            for i, item in enumerate(values):
                budget.iterate()
                loop_dict["counter0"] = i
                loop_dict["counter"] = i + 1
                loop_dict["revcounter"] = len_values - i
                loop_dict["revcounter0"] = len_values - i - 1
                loop_dict["first"] = i == 0
                loop_dict["last"] = i == len_values - 1
                if unpack:
                    try:
                        len_item = len(item)
                    except TypeError:  # not an iterable
                        len_item = 1
                    if len(self.loopvars) != len_item:
                        raise ValueError(f"Need {len(self.loopvars)} values to unpack in for loop; got {len_item}.")
                    context.update(dict(zip(self.loopvars, item, strict=True)))
                else:
                    context[self.loopvars[0]] = item
                for node in nodelist_loop:
                    text = str(node.render_annotated(context))  # str already; the stubs say int | str
                    length += len(text)
                    output.append(text)
                if unpack:
                    context.pop()
                if length > MAX_OUTPUT_CHARS:
                    raise budget.fail(f"a loop made more than {MAX_OUTPUT_CHARS:,} characters")
        return mark_safe("".join(output))  # noqa: S308 - as Django's ForNode: its parts are escaped


def _do_for(parser: Parser, token: Any) -> _ForNode:
    node = defaulttags.do_for(parser, token)
    return _ForNode(node.loopvars, node.sequence, node.is_reversed, node.nodelist_loop, node.nodelist_empty)


def _do_load(parser: Parser, token: Any) -> Node:
    """`{% load i18n %}` is accepted (its tags are built in); no other library can be loaded."""
    if token.split_contents()[1:] != ["i18n"]:
        raise TemplateSyntaxError(
            f"The tag {{% load %}} on line {token.lineno} may only load i18n in notification templates "
            "(its tags are built in)."
        )
    return defaulttags.LoadNode()


# --- parsing ----------------------------------------------------------------------------------


class _Parser(Parser):
    """Django's parser with payload-only variables, checked arguments and plain refusals."""

    def parse(self, parse_until: Any = None) -> Any:
        nodelist = super().parse(parse_until)
        bounded = _NodeList(nodelist)
        bounded.contains_nontext = getattr(nodelist, "contains_nontext", False)
        return bounded

    def compile_filter(self, token: str) -> Any:
        expression = super().compile_filter(token)
        if isinstance(expression.var, Variable):
            expression.var = _PayloadVariable(expression.var.var)
        filters = []
        for func, args in expression.filters:
            args = [(lookup, _PayloadVariable(arg.var) if lookup else arg) for lookup, arg in args]
            name = getattr(func, "_filter_name", "")
            check = _ARGUMENT_CHECKS.get(name)
            if check is not None:
                # A literal too big is refused when the row is saved, not when it is sent.
                for lookup, arg in args:
                    if not lookup:
                        check(name, arg)  # a string: ljust:"20"
                    elif arg.lookups is None:
                        check(name, arg.literal)  # a number: ljust:20
            filters.append((func, args))
        expression.filters = filters
        return expression

    def find_filter(self, filter_name: str) -> Any:
        if filter_name in self.filters:
            return self.filters[filter_name]
        raise TemplateSyntaxError(
            f"The filter |{filter_name} is not available in notification templates. "
            f"Filters: {', '.join(ALLOWED_FILTERS)}."
        )

    def invalid_block_tag(self, token: Any, command: str, parse_until: Any = None) -> Any:
        if parse_until:
            expected = ", ".join(f"{{% {name} %}}" for name in parse_until)
            if command.startswith("end") or command in ("else", "elif", "empty"):
                raise self.error(token, f"Unexpected {{% {command} %}} on line {token.lineno}; expected {expected}.")
        raise self.error(
            token,
            f"The tag {{% {command} %}} on line {token.lineno} is not available in notification templates. "
            f"Tags: {', '.join(ALLOWED_TAGS)}.",
        )

    def extend_nodelist(self, nodelist: Any, node: Any, token: Any) -> None:
        if type(node) is VariableNode:
            node = _VariableNode(node.filter_expression)
        super().extend_nodelist(nodelist, node, token)


class _Template(Template):
    """A template compiled by `_Parser`, rendered within one budget and MAX_OUTPUT_CHARS."""

    def compile_nodelist(self) -> Any:
        parser = _Parser(
            Lexer(self.source).tokenize(),
            self.engine.template_libraries,
            self.engine.template_builtins,
            self.origin,
        )
        nodelist = parser.parse()
        self.extra_data = parser.extra_data  # type: ignore[attr-defined]  # Django 5.1+, not in the stubs
        return nodelist

    def render(self, context: Any) -> Any:
        budget = _Budget()
        token = _budget.set(budget)
        try:
            output = super().render(context)
        finally:
            _budget.reset(token)
        if budget.failure is not None:  # a limit hit inside an `if` that swallowed it
            raise TemplateRenderError(budget.failure)
        if len(output) > MAX_OUTPUT_CHARS:
            raise TemplateRenderError(f"the result is longer than {MAX_OUTPUT_CHARS:,} characters")
        return output


@functools.cache
def _library() -> Library:
    library = Library()
    for name in ALLOWED_TAGS:
        library.tags[name] = _do_for if name == "for" else defaulttags.register.tags[name]
    for name in I18N_TAGS:
        library.tags[name] = i18n.register.tags[name]
    library.tags["load"] = _do_load
    for name in ALLOWED_FILTERS:
        library.filters[name] = _bounded_filter(name, defaultfilters.register.filters[name])
    return library


class RestrictedEngine(Engine):
    """A Django template engine with only the allow-listed tags and filters, and no loaders.

    Django's default builtins (`default_builtins`: every default tag, filter and loader tag)
    are never loaded, no library can be `{% load %}`ed, and there is no template to include
    or extend: `from_string` is the only way in.
    """

    default_builtins: list[str] = []

    def __init__(self) -> None:
        super().__init__(loaders=[], libraries={}, builtins=[], debug=False, autoescape=False)

    def get_template_builtins(self, builtins: list[str]) -> list[Library]:
        return [_library()]

    def get_template_libraries(self, libraries: dict[str, str]) -> dict[str, Library]:
        return {}

    def from_string(self, template_code: str) -> Template:
        return _Template(template_code, engine=self)


@functools.cache
def engine() -> RestrictedEngine:
    """The one engine notification templates are compiled with."""
    return RestrictedEngine()


@functools.lru_cache(maxsize=256)
def _compile(text: str) -> Template:
    # A recurring row's template is parsed once per process, not at every firing. Compiled
    # templates keep no render state (that lives in the context), so threads may share them.
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateSyntaxError(f"The template is longer than {MAX_TEMPLATE_CHARS:,} characters.")
    return engine().from_string(text)


# --- the API ----------------------------------------------------------------------------------


def template_errors(text: str) -> list[str]:
    """Why `text` cannot be a notification template; empty when it can. Never raises."""
    if "{" not in text:
        return []  # no tag, variable or comment: nothing to parse (the tick checks every row)
    try:
        _compile(text)
    except TemplateSyntaxError as exc:
        return [f"Template error: {exc}"]
    except Exception as exc:  # noqa: BLE001 - whatever a tag's parser raises is a refusal
        return [f"Template error: {type(exc).__name__}."]
    return []


def render(text: str, payload: Mapping[str, Any], *, autoescape: bool = False) -> str:
    """Render `text` with `payload` as its context; plain text unless `autoescape`.

    Raises `TemplateRenderError` for every failure: a template `template_errors` refuses, a
    limit reached with this payload, or an exception in a filter or tag.
    """
    if "{" not in text:
        return text
    try:
        template = _compile(text)
        # A copy: `{% with %}`, `{% cycle ... as x %}` and `{% now ... as x %}` store names in
        # the context's top layer, which must not be the payload the webhook sends.
        return str(template.render(Context(dict(payload), autoescape=autoescape)))
    except TemplateRenderError:
        raise
    except TemplateSyntaxError as exc:
        raise TemplateRenderError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - its message may quote the payload: name the type only
        raise TemplateRenderError(f"{type(exc).__name__} in a tag or filter") from None
