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
- output metadata (:func:`clean_metadata`): nbconvert's classic template, which formgrader's
  ``formgrade`` and the feedback template extend, writes an image's ``width={{ width }}`` and
  ``height`` unquoted, so ``{"image/png": {"width": "1 onerror=..."}}`` becomes an event attribute.
  Only integer width/height and a plain-text alt (written quoted) are kept, per image type and at
  the top level where the template looks; every other key is dropped;
- the finished notebook (:func:`clean_outputs`): an ``update_display_data`` message (and a display
  that reuses a ``display_id``) rewrites earlier outputs inside nbclient without going through the
  executor's ``output`` hook, so every output is cleaned once more after the run;
- written answers (:func:`clean_markdown`): an answer whose rendering bleach would change is
  replaced by its cleaned rendering (HTML is valid Markdown), so an honest answer stays as written;
- element ids: formgrader finds each graded cell's score box, extra-credit box and comment with
  ``$("#" + grade_id)`` (and ``-comment``, ``_extra_credit``), so an element of learner HTML with
  such an id, placed before the real box, takes the lookup over and the instructor's box stops
  working. Outputs lose every ``id`` (quietly: pandas styles set some); a written answer whose
  rendering has a reserved id (:func:`reserved_ids`: a Markdown heading's id is its text, so
  ``## answer-fp8`` gets one) is replaced by its rendering without it, and flagged.
"""

from __future__ import annotations

import re
from html import unescape as html_unescape

import bleach
from nbformat import from_dict

#: Formatting tags nbconvert's Markdown and pandas-style tables produce; nothing that runs code.
TAGS = frozenset({"a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
                  "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span",
                  "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"})
ATTRIBUTES = {"a": ["href", "title"], "img": ["src", "alt", "title", "width", "height"],
              "*": ["class", "id", "align", "colspan", "rowspan"]}
#: Outputs keep no ``id`` (see the module docstring).
OUTPUT_ATTRIBUTES = {**ATTRIBUTES, "*": [a for a in ATTRIBUTES["*"] if a != "id"]}
#: Ids of formgrader's own page (nbgrader's formgrade/index.html.j2) besides the per-cell ones.
PAGE_IDS = frozenset({"notebook", "notebook-container", "statusmessage"})
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
#: Output types that carry script, or markup no cleaner here reads.
DROPPED = frozenset({"application/javascript", "text/javascript", "application/x-javascript", "image/svg+xml",
                     "text/markdown"})


def clean_html(html: str, attributes: dict = ATTRIBUTES) -> str:
    """``html`` with every tag and attribute outside :data:`TAGS`/``attributes`` escaped or dropped."""
    return bleach.clean(html, tags=TAGS, attributes=attributes, protocols=PROTOCOLS)


def reserved_ids(nb) -> frozenset[str]:
    """The element ids formgrader's page uses for ``nb``: its own (:data:`PAGE_IDS`) and, for every
    graded cell, the grade_id, ``<grade_id>_extra_credit`` and ``<grade_id>-comment``."""
    ids = set(PAGE_IDS)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            ids.update({gid, f"{gid}_extra_credit", f"{gid}-comment"})
    return frozenset(ids)


def clean_data(data: dict) -> tuple[dict, bool]:
    """An output's ``data`` (mime type -> content) safe to render; and whether anything changed."""
    out, changed = {}, False
    for mime, value in data.items():
        if mime in DROPPED:
            changed = True
            continue
        if mime == "text/html":
            text = "".join(value) if isinstance(value, list) else str(value)
            value = clean_html(text, OUTPUT_ATTRIBUTES)
            if clean_html(text) != text:  # dropped ids alone are no finding
                changed = True
                if "text/plain" in data:  # shown instead (a DataFrame's <style> block would show as text)
                    continue
        out[mime] = value
    if changed and not out:
        out["text/plain"] = "[grader] output removed: it could run script where the instructor reads it"
    return out, changed


#: Output metadata keys a template renders as an attribute (see the module docstring).
_SIZE_KEYS, _ALT_KEY = ("width", "height"), "alt"
_ALT_CHARS = 1000


def _size(value) -> int | None:
    """``value`` as a non-negative pixel count, or None when it is not one (a bool, "1 onerror=...")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value.strip())
    return None


def _clean_keys(meta: dict) -> tuple[dict, bool]:
    out, rejected = {}, False
    for key in _SIZE_KEYS:
        if key in meta:
            size = _size(meta[key])
            if size is None:
                rejected = True
            else:
                out[key] = size
    if _ALT_KEY in meta:
        if isinstance(meta[_ALT_KEY], str):
            out[_ALT_KEY] = meta[_ALT_KEY][:_ALT_CHARS]
        else:
            rejected = True
    return out, rejected


def clean_metadata(metadata: dict) -> tuple[dict, bool]:
    """An output's ``metadata`` with only what is safe to render: integer ``width``/``height`` and a
    plain-text ``alt``, under a mime type or at the top level (where nbconvert's ``get_metadata``
    looks); everything else (``filenames``, ``isolated``, ``needs_background``, ...) is dropped.

    Returns:
        (cleaned metadata, whether a width, height or alt was rejected: a value that could only be
        meant to inject markup, worth the instructor's review). Dropping other keys is no finding:
        matplotlib and IPython set some of them on honest figures.
    """
    if not isinstance(metadata, dict):
        return {}, bool(metadata)
    out, rejected = _clean_keys(metadata)
    for mime, value in metadata.items():
        if isinstance(value, dict) and "/" in mime:
            kept, bad = _clean_keys(value)
            rejected |= bad
            if kept:
                out[mime] = kept
    return out, rejected


def clean_content(content: dict) -> tuple[dict, bool]:
    """A display message's (or output's) ``content`` with :func:`clean_data` and :func:`clean_metadata`
    applied; and whether something that could run script was removed."""
    data, changed = clean_data(content.get("data", {}))
    metadata, rejected = clean_metadata(content.get("metadata", {}))
    return {**content, "data": data, "metadata": metadata}, changed or rejected


def clean_outputs(nb) -> list[int]:
    """Clean every rich output of ``nb``'s code cells in place (:func:`clean_content`); the indices of
    the cells where something that could run script was removed."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") in ("display_data", "execute_result"):
                cleaned, changed = clean_content(out)
                out["data"], out["metadata"] = from_dict(cleaned["data"]), from_dict(cleaned["metadata"])
                if changed and index not in found:
                    found.append(index)
    return found


def clean_markdown(source: str, reserved: frozenset[str] = frozenset()) -> str | None:
    """A cleaned replacement for a written answer whose rendering holds script (raw HTML, an event
    attribute, a ``javascript:`` link) or an element id in ``reserved`` (:func:`reserved_ids`), or
    None when its rendering is safe as it is."""
    from nbconvert.filters.markdown import markdown2html

    html = markdown2html(source).replace(" />", ">")  # bleach writes void tags (<img>, <br>) this way
    cleaned = clean_html(html)
    if reserved and _ID.search(cleaned):
        cleaned = _ID.sub(lambda m: "" if html_unescape(m.group(2)) in reserved else m.group(0), cleaned)
    return None if cleaned == html else cleaned


#: An id attribute as bleach writes it (double-quoted, entities escaped).
_ID = re.compile(r'(\s+id="([^"]*)")')
