"""Learner HTML is shown to the instructor: keep script out of it.

Formgrader renders an autograded notebook with nbconvert straight into the instructor's Jupyter page
(same origin as the server's API, gradebook included), and feedback goes to the learner's browser.
nbconvert does not sanitize by default, and nbgrader's formgrade template renders written answers
with ``markdown2html``, which keeps raw HTML and ``javascript:`` links. So a ``<script>`` or an
``onerror=`` in an output or a written answer would run as the instructor, able to change any
student's grades. The grader therefore cleans, at autograde time:

- outputs (:func:`clean_data`): script types (``application/javascript``), SVG and Markdown are
  dropped, HTML is cleaned with bleach (nbconvert's own dependency) to plain formatting tags, or
  dropped for the output's plain text where it has one;
- written answers (:func:`clean_markdown`): an answer whose rendering bleach would change is
  replaced by its cleaned rendering (HTML is valid Markdown), so an honest answer stays as written.
"""

from __future__ import annotations

import bleach

#: Formatting tags nbconvert's Markdown and pandas-style tables produce; nothing that runs code.
TAGS = frozenset({"a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
                  "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span",
                  "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"})
ATTRIBUTES = {"a": ["href", "title"], "img": ["src", "alt", "title", "width", "height"],
              "*": ["class", "id", "align", "colspan", "rowspan"]}
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
#: Output types that carry script, or markup no cleaner here reads.
DROPPED = frozenset({"application/javascript", "text/javascript", "application/x-javascript", "image/svg+xml",
                     "text/markdown"})


def clean_html(html: str) -> str:
    """``html`` with every tag and attribute outside :data:`TAGS`/:data:`ATTRIBUTES` escaped."""
    return bleach.clean(html, tags=TAGS, attributes=ATTRIBUTES, protocols=PROTOCOLS)


def clean_data(data: dict) -> tuple[dict, bool]:
    """An output's ``data`` (mime type -> content) safe to render; and whether anything changed."""
    out, changed = {}, False
    for mime, value in data.items():
        if mime in DROPPED:
            changed = True
            continue
        if mime == "text/html":
            text = "".join(value) if isinstance(value, list) else str(value)
            value = clean_html(text)
            if value != text:
                changed = True
                if "text/plain" in data:  # shown instead (a DataFrame's <style> block would show as text)
                    continue
        out[mime] = value
    if changed and not out:
        out["text/plain"] = "[grader] output removed: it could run script where the instructor reads it"
    return out, changed


def clean_markdown(source: str) -> str | None:
    """A cleaned replacement for a written answer whose rendering holds script (raw HTML, an event
    attribute, a ``javascript:`` link), or None when bleach leaves its rendering unchanged."""
    from nbconvert.filters.markdown import markdown2html

    html = markdown2html(source).replace(" />", ">")  # bleach writes void tags (<img>, <br>) this way
    cleaned = clean_html(html)
    return None if cleaned == html else cleaned
