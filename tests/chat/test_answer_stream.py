"""An answer's SSE stream (served beside Django, chat/answer_stream.py) refuses what the chat's other
endpoints refuse, in the same JSON shape, and resumes where the reader says."""

from __future__ import annotations

from tests.chat.live import ChatClient
from tests.conftest import make_user


def _stream(chat: ChatClient, message_id: int, **kwargs):
    return chat.http.get(f"/chat/api/messages/{message_id}/stream", **kwargs)


def test_a_question_has_no_stream_and_a_made_up_event_id_is_refused(chat):
    turn = chat.send_ok("Two words, please.")
    question = _stream(chat, turn["user_message"]["id"])
    assert question.status_code == 400 and question.json()["error"]["message"] == "Only answers have a token stream."
    bad = _stream(chat, turn["assistant_message"]["id"], headers={"Last-Event-ID": "not-an-id"})
    assert bad.status_code == 400 and "Last-Event-ID" in bad.json()["error"]["message"]
    assert chat.http.post(f"/chat/api/messages/{turn['assistant_message']['id']}/stream").status_code == 405


def test_a_reader_resumes_after_the_last_event_it_saw(chat):
    turn = chat.send_ok("Tell me a short story.")
    answer_id = turn["assistant_message"]["id"]
    text, final, events = chat.answer(answer_id)
    first = events[0]
    resumed = list(chat.events(answer_id, last_event_id=first.id))
    assert first.kind == "delta" and resumed[-1].kind == "done"
    assert first.data["text"] + "".join(e.data["text"] for e in resumed if e.kind == "delta") == text
    by_query = _stream(chat, answer_id, params={"after": first.id})
    assert by_query.status_code == 200 and f"id: {first.id}\n" not in by_query.text


def test_staff_who_have_not_enrolled_two_factor_are_refused(server, transactional_db):
    staff = ChatClient(server, make_user("staff@example.com", staff=True))
    refused = _stream(staff, 1)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "two_factor_required"
    staff.close()
