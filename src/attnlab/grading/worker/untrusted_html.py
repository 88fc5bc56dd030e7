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
- element ids and classes: formgrader finds each graded cell's score box, extra-credit box and
  comment with ``$("#" + grade_id)`` (and ``-comment``, ``_extra_credit``), and inside a cell's panel
  by class (``.score``, ``.comment``...), so learner HTML with such an id or class, placed before the
  real box, takes the lookup over (a comment typed by the instructor is then read from the wrong
  element). Outputs lose every ``id`` (quietly: pandas styles set some); a ``class`` naming one of
  formgrader's (:data:`FORMGRADER_CLASSES`) is dropped everywhere; a written answer whose rendering
  has a reserved id (:func:`reserved_ids`: a Markdown heading's id is its text, so ``## answer-fp8``
  gets one) is replaced by its rendering without it, and flagged;
- the replacement is itself Markdown, which formgrader renders again: it is cleaned until a pass
  changes nothing (text that a ``<script>`` block hid from the first rendering becomes Markdown once
  the tag is escaped), or, where it does not settle, the answer is shown as a code block;
- learner raw cells, which the template writes as they are, are cleaned like outputs;
- links: the templates strip a leading ``files/`` from every ``href``/``src`` after rendering
  (``strip_files_prefix``), so ``files/javascript:...`` would pass bleach as a relative link and
  run as ``javascript:``; a URL is judged after that strip (and HTML entities), and the answers are
  rendered as formgrader renders them (with the cell's attachments, then the strip).
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
#: Classes formgrader's page and scripts find elements by (nbgrader's formgrade template and
#: formgrade*.js): learner HTML may not carry them.
FORMGRADER_CLASSES = frozenset({"score", "score-saved", "comment", "comment-saved", "extra-credit", "mark-graded",
                                "full-credit", "no-credit", "tabbable", "nbgrader_cell", "help", "save-icon",
                                "scoring-buttons", "nbgrader-label", "name-shown", "name-hidden", "live-notebook"})
#: Ids of formgrader's own page (nbgrader's formgrade/index.html.j2) besides the per-cell ones.
PAGE_IDS = frozenset({"notebook", "notebook-container", "statusmessage"})
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
#: Output types that carry script, or markup no cleaner here reads.
DROPPED = frozenset({"application/javascript", "text/javascript", "application/x-javascript", "image/svg+xml",
                     "text/markdown"})


#: What the templates' ``strip_files_prefix`` removes from a URL (repeatedly, to be safe), and a scheme.
_FILES_PREFIX = re.compile(r"^(?:\.\./)*/?files/", re.IGNORECASE)
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):", re.IGNORECASE)


def _url_ok(value: str) -> bool:
    """Whether a ``href``/``src`` value is safe once the page decodes its entities and the templates
    strip ``files/``: no scheme (a relative link) or one of :data:`PROTOCOLS`."""
    url = "".join(ch for ch in html_unescape(value) if ord(ch) > 0x20)  # browsers skip these in a scheme
    while _FILES_PREFIX.match(url):
        url = _FILES_PREFIX.sub("", url, count=1)
    scheme = _SCHEME.match(url)
    return scheme is None or scheme.group(1).lower() in PROTOCOLS


def _allowed(attributes: dict):
    def allowed(tag: str, name: str, value: str) -> bool:
        if name not in attributes.get(tag, ()) and name not in attributes.get("*", ()):
            return False
        if name in ("href", "src") and not _url_ok(value):
            return False
        return not (name == "class" and FORMGRADER_CLASSES.intersection(value.split()))
    return allowed


def clean_html(html: str, attributes: dict = ATTRIBUTES) -> str:
    """``html`` with every tag and attribute outside :data:`TAGS`/``attributes`` escaped or dropped, and
    any ``class`` that names one of :data:`FORMGRADER_CLASSES` dropped."""
    return bleach.clean(html, tags=TAGS, attributes=_allowed(attributes), protocols=PROTOCOLS)


def reserved_ids(nb) -> frozenset[str]:
    """The element ids formgrader's page uses for ``nb``: its own (:data:`PAGE_IDS`) and, for every
    cell with a grade_id, the grade_id, ``<grade_id>_extra_credit`` and ``<grade_id>-comment``."""
    ids = set(PAGE_IDS)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if isinstance(gid, str) and gid:
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


def _drop_reserved_ids(html: str, reserved: frozenset[str]) -> str:
    return _ID.sub(lambda m: "" if html_unescape(m.group(2)) in reserved else m.group(0), html)


def render_markdown(source: str, attachments: dict | None = None) -> str:
    """``source`` rendered as formgrader's exporter renders a Markdown cell: nbconvert's renderer with the
    cell's attachments, then the templates' ``strip_files_prefix``.

    Raises:
        Exception: whatever nbconvert raises (a missing attachment: ``InvalidNotebook``).
    """
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
    from nbconvert.filters.strings import strip_files_prefix

    renderer = IPythonRenderer(escape=False, attachments=dict(attachments or {}))
    return strip_files_prefix(MarkdownWithMath(renderer=renderer).render(source))


def _clean_rendering(source: str, reserved: frozenset[str], attachments: dict | None) -> str | None:
    html = render_markdown(source, attachments).replace(" />", ">")  # bleach writes void tags this way
    cleaned = _drop_reserved_ids(clean_html(html), reserved)
    return None if cleaned == html else cleaned


def _as_code_block(source: str) -> str:
    """``source`` as a fenced code block: shown as typed, never rendered as Markdown or HTML."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", source)), default=0))
    return f"{fence}text\n{source}\n{fence}\n"


def clean_markdown(source: str, reserved: frozenset[str] = frozenset(), passes: int = 4,
                   attachments: dict | None = None) -> str | None:
    """A cleaned replacement for a written answer whose rendering holds script (raw HTML, an event
    attribute, a ``javascript:`` link), one of formgrader's classes, or an element id in ``reserved``
    (:func:`reserved_ids`); None when its rendering is safe as it is.

    The replacement is the cleaned rendering (HTML is valid Markdown), cleaned again until a pass
    leaves it unchanged (formgrader renders it once more); after ``passes`` passes that still change
    it, the answer as a code block (also when nbconvert cannot render it: a missing attachment).
    """
    try:
        current = _clean_rendering(source, reserved, attachments)
        if current is None:
            return None
        for _ in range(passes):
            again = _clean_rendering(current, reserved, attachments)
            if again is None:
                return current
            current = again
    except Exception:  # noqa: BLE001 (nbconvert would fail on it in formgrader too: show it as typed)
        pass
    return _as_code_block(source)


def clean_raw(source: str, reserved: frozenset[str] = frozenset()) -> str | None:
    """A cleaned replacement for a learner raw cell (nbconvert writes its text into the page as it is),
    or None when bleach leaves it unchanged and it holds no reserved id."""
    cleaned = _drop_reserved_ids(clean_html(source), reserved)
    return None if cleaned == source else cleaned


#: An id attribute as bleach writes it (double-quoted, entities escaped).
_ID = re.compile(r'(\s+id="([^"]*)")')
