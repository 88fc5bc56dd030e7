"""Render a notebook the way formgrader shows it to the instructor, and find what would run there.

nbgrader's formgrader (``nbgrader/server_extensions/formgrader/formgrader.py``) renders a submission
with nbconvert's ``HTMLExporter`` and the ``formgrade`` template from its own template folder
(``extends 'nbconvert/templates/classic/index.html.j2'``); the feedback template extends the same
classic template. This does the same, without a server.
"""

from __future__ import annotations

from html.parser import HTMLParser

FORMGRADE_RESOURCES = {"assignment_id": "a", "notebook_id": "n", "submission_id": "s", "index": 0, "total": 1,
                       "base_url": "", "student": "x", "last_name": "", "first_name": "", "notebook_path": "p"}


def formgrade_html(nb) -> str:
    """``nb`` rendered by formgrader's exporter and template."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    html, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=dict(FORMGRADE_RESOURCES))
    return html


class _Live(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")


def _live(html: str) -> list[str]:
    parser = _Live()
    parser.feed(html)
    return parser.found


def event_attributes(html: str) -> list[str]:
    """Every event-handler attribute (``onerror=``, ``onload=``...) and ``javascript:`` URL in ``html``
    that the template does not write itself (formgrade's page has its own ``onclick`` handlers)."""
    from nbformat.v4 import new_notebook

    own = set(_live(formgrade_html(new_notebook())))
    return [a for a in _live(html) if a not in own]


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id":
                self.found.append((value or "", tag))


def first_with_id(html: str, element_id: str) -> str | None:
    """The tag of the first element whose id is ``element_id`` (what ``$("#" + id)`` finds), or None."""
    parser = _Ids()
    parser.feed(html)
    return next((tag for value, tag in parser.found if value == element_id), None)
