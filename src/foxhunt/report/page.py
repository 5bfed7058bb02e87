"""The HTML page every foxhunt report is (the run report, the tune report): a Jinja2 template
(``templates/page.html.j2``, autoescaped) of a title, an optional navigation and sections.

A section's body is HTML built by its module from escaped pieces (:mod:`foxhunt.report.fmt`), passed
as :class:`markupsafe.Markup`; every other text goes through the template's escaping.
"""

from __future__ import annotations

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


def render_page(title: str, css: str, sections: list[Section], *, nav: bool) -> str:
    """The page: ``title`` (escaped), ``css`` (the report's own style sheet) and ``sections`` in order,
    with a link to each at the top when ``nav``."""
    return _template().render(title=title, css=Markup(css), sections=sections, nav=nav)
