"""The HTML page every foxhunt report is (the run report, the tune report): a Jinja2 template
(``templates/page.html.j2``, autoescaped) of a title, an optional navigation and sections.

A section's body is laid out by its own template (:func:`render_body`, ``templates/*.html.j2``):
Python computes the numbers and their formatted text (:mod:`foxhunt.report.fmt`, escaped HTML passed
as :class:`markupsafe.Markup`), the template places them; every other text goes through the
template's escaping.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import cache

import jinja2
from markupsafe import Markup


@dataclass(frozen=True)
class Section:
    anchor: str
    heading: str
    body: Markup


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("foxhunt.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a name the template uses but is not given: an error
        keep_trailing_newline=True,
    )
    return env.get_template("page.html.j2")


@cache
def _body_env() -> jinja2.Environment:
    # a body is one run of HTML: a block tag's line leaves no blank line or indent behind it
    return jinja2.Environment(
        loader=jinja2.PackageLoader("foxhunt.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_escape,
    )


def _escape(value: object) -> object:
    # text escaped as foxhunt.report.fmt.esc does (' as &#x27;), so a cell reads byte for byte as
    # the same text built in Python (the verdict's, the tune report's); Markup passes as it is
    return value if isinstance(value, Markup) else Markup(html.escape(str(value)))


def render_body(name: str, **context: object) -> Markup:
    """The section body laid out by template ``name`` from ``context`` (text in it escaped, a
    :class:`markupsafe.Markup` value placed as it is)."""
    return Markup(_body_env().get_template(name).render(**context))


def render_page(title: str, css: str, sections: list[Section], *, nav: bool) -> str:
    """The page: ``title`` (escaped), ``css`` (the report's own style sheet) and ``sections`` in order,
    with a link to each at the top when ``nav``."""
    return _template().render(title=title, css=Markup(css), sections=sections, nav=nav)
