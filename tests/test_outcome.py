"""Outcomes as data (attnlab.core.outcome, issue 32 item 3): kinds survive JSON, decisions read kinds."""

from __future__ import annotations

import json

import pytest

from attnlab.core import outcome
from attnlab.core.outcome import Kind, Note, Status, is_review, notes_of, split_reviews


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_round_trips_through_json(kind):
    note = Note(kind, f"some text for people ({kind})")
    back = notes_of(json.loads(json.dumps([note.to_json()])))
    assert back == [note] and back[0].kind is kind


@pytest.mark.parametrize("status", list(Status))
def test_each_status_round_trips_through_json(status):
    assert Status(json.loads(json.dumps(status))) is status
    assert status == str(status)  # reports print the same words as before


def test_reworded_text_does_not_change_the_decision():
    worded = Note(Kind.REVIEW, "needs review: the check could not undo a dispatcher override")
    reworded = Note(Kind.REVIEW, "a person should look at this dispatcher override")
    info = Note(Kind.INFO, "needs review: looks like a review note but is not one")
    for note in (worded, reworded):
        assert is_review(note.to_json()) and is_review(note)
    assert not is_review(info.to_json())
    reviews, others = split_reviews([worded.to_json(), reworded.to_json(), info.to_json()])
    assert reviews == [worded.text, reworded.text] and others == [info.text]


def test_plain_strings_keep_their_old_meaning():
    flagged = outcome.review("a result right by a method the notebook does not teach")
    assert flagged.text == "needs review: a result right by a method the notebook does not teach"
    assert notes_of([flagged.text, "a repair"]) == [flagged, Note(Kind.INFO, "a repair")]
    assert split_reviews([flagged.text, "a repair", None, 3]) == ([flagged.text], ["a repair"])
    assert notes_of(None) == []


def test_flag_prints_the_same_text(capsys):
    from attnlab.core import review

    review.flag("why")
    assert capsys.readouterr().out == "[grader] needs review: why\n"


def test_a_timeout_is_contended_by_its_status_whatever_its_reason_says():
    from attnlab.grading.host.autograde import NotebookResult, contended, not_graded

    for reason in ("grading ran past 600 s and was stopped", "stopped: too slow (reworded)"):
        result = NotebookResult("s", "n", Status.TIMEOUT, reason=reason)
        assert contended(result) and not_graded([result]) == [result]


def test_reports_print_a_status_as_the_word_they_always_printed(tmp_path):
    from attnlab.grading.host.autograde import (NotebookResult, format_report, read_report_json,
                                                write_report_json)

    typed = [NotebookResult("s", "n", Status.MISSING, reason="no submission")]
    plain = [NotebookResult("s", "n", "missing", reason="no submission")]
    assert format_report(typed) == format_report(plain)
    write_report_json(typed, tmp_path / "r.json")
    assert read_report_json(tmp_path / "r.json")[0].status is not None
    assert read_report_json(tmp_path / "r.json")[0].status == Status.MISSING


def test_a_note_of_an_unknown_kind_goes_to_review_instead_of_stopping_the_grader():
    note = Note.from_json({"kind": "no-such-kind", "text": "written by a newer grader"})
    assert note.kind is Kind.REVIEW and note.text == "written by a newer grader"
