"""Read-only links to a conversation: who may make them, what the public page shows, and when it stops."""

import base64
import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import reverse

from chat.models import Message, SharedConversation
from chat.sharing import selectors, services
from config.refusals import BadInput, NotAllowed, NotFound, RateLimited
from documents.models import Chunk, Document
from tests.chat.factories import conversation_for, exchange, say
from tests.conftest import make_user
from tests.support.accounts import make_staff, signed_in
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(db):
    return make_user("ada.lovelace@example.com", display_name="Ada Lovelace")


@pytest.fixture
def chat(owner):
    conversation = conversation_for(owner, title="Rust lifetimes")
    exchange(conversation, "What is a lifetime?", "How long a **borrow** lives.")
    return conversation


@pytest.fixture
def anonymous():
    return Client()


def share(conversation, **options):
    link, _ = services.share_conversation(conversation.owner, conversation.pk, **options)
    return link


def public_page(client, link_or_token):
    token = link_or_token if isinstance(link_or_token, str) else link_or_token.token
    return client.get(f"/s/{token}/")


def page_text(response) -> str:
    return response.content.decode()


# --- the token ----------------------------------------------------------------------------------------------


def test_a_link_token_is_long_random_and_url_safe(chat, other_user):
    tokens = {share(chat).token}
    services.revoke_conversation_share(chat.owner, chat.pk)
    for n in range(30):
        conversation = conversation_for(other_user, title=f"chat {n}")
        exchange(conversation, "q", "a")
        tokens.add(share(conversation).token)

    assert len(tokens) == 31  # no two alike
    for token in tokens:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert len(raw) * 8 >= 128
        assert token.replace("-", "").replace("_", "").isalnum()


def test_a_token_one_character_off_finds_nothing(chat, anonymous):
    link = share(chat)
    near = link.token[:-1] + ("A" if link.token[-1] != "A" else "B")

    assert public_page(anonymous, link).status_code == 200
    assert public_page(anonymous, near).status_code == 404


# --- anyone with the link can read; only the owner can share ---------------------------------------------------


def test_anyone_with_the_link_reads_it_without_signing_in(chat, anonymous):
    response = public_page(anonymous, share(chat))

    assert response.status_code == 200
    text = page_text(response)
    assert "Rust lifetimes" in text
    assert "What is a lifetime?" in text
    assert "How long a **borrow** lives." in text  # as text; the page's script renders the markdown
    assert response["X-Robots-Tag"] == "noindex, nofollow"
    assert response["Referrer-Policy"] == "no-referrer"
    assert "no-store" in response["Cache-Control"]
    assert '<meta name="robots" content="noindex, nofollow">' in text
    assert not response.cookies.get("sessionid")


def test_a_signed_in_stranger_reads_it_too_and_sees_nothing_of_the_owner(chat, other_user):
    client = Client()
    client.force_login(other_user)

    response = public_page(client, share(chat))

    assert response.status_code == 200
    assert "What is a lifetime?" in page_text(response)
    assert "ada.lovelace" not in page_text(response)


def test_you_cannot_share_another_users_conversation(chat, other_user):
    with pytest.raises(NotFound):
        services.share_conversation(other_user, chat.pk)

    client = Client()
    client.force_login(other_user)
    url = reverse("chat:conversation-share", args=[chat.pk])
    assert client.post(url, "{}", content_type="application/json").status_code == 404
    assert client.get(url).status_code == 404
    assert client.delete(url).status_code == 404
    assert not SharedConversation.objects.exists()


def test_you_cannot_revoke_another_users_link(chat, other_user):
    link = share(chat)
    with pytest.raises(NotFound):
        services.revoke_share(other_user, link.pk)

    client = Client()
    client.force_login(other_user)
    response = client.post(reverse("account_shared_links"), {"revoke": link.pk})
    assert response.status_code == 404
    link.refresh_from_db()
    assert link.is_active


def test_a_suspended_owner_cannot_share_and_their_links_stop_working(chat, anonymous):
    link = share(chat)
    chat.owner.is_suspended = True
    chat.owner.suspended_reason = "spam"
    chat.owner.save()

    with pytest.raises(NotAllowed):
        services.share_conversation(chat.owner, chat.pk)
    assert public_page(anonymous, link).status_code == 404


def test_the_sharing_endpoint_is_for_signed_in_owners_only(chat, anonymous):
    url = reverse("chat:conversation-share", args=[chat.pk])
    response = anonymous.post(url, "{}", content_type="application/json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_bad_choices_are_refused_with_a_sentence(chat):
    with pytest.raises(BadInput, match="snapshot or live"):
        services.share_conversation(chat.owner, chat.pk, mode="everything")
    with pytest.raises(BadInput, match="true or false"):
        services.share_conversation(chat.owner, chat.pk, show_owner_name="yes")
    with pytest.raises(BadInput, match="show_passages must be true or false"):
        services.share_conversation(chat.owner, chat.pk, show_passages="yes")
    empty = conversation_for(chat.owner)
    with pytest.raises(BadInput, match="nothing to share"):
        services.share_conversation(chat.owner, empty.pk)


# --- revoked, taken down, unknown: one and the same 404 -----------------------------------------------------------


def test_revoked_taken_down_and_unknown_links_answer_the_same_404(chat, anonymous, owner, staff_user):
    revoked = share(chat)
    services.revoke_share(owner, revoked.pk)
    other = conversation_for(owner, title="Second")
    exchange(other, "q", "a")
    taken = share(other)
    services.take_down(staff_user, [taken], "Harassment report #12")

    pages = [public_page(anonymous, revoked), public_page(anonymous, taken), public_page(anonymous, "x" * 32)]

    assert [p.status_code for p in pages] == [404, 404, 404]
    bodies = {page_text(p) for p in pages}
    assert len(bodies) == 1  # nothing tells the three apart
    body = bodies.pop()
    assert "This link does not work" in body
    assert "Harassment" not in body and "Rust lifetimes" not in body and "Second" not in body
    for page in pages:
        assert page["X-Robots-Tag"] == "noindex, nofollow"
        assert page["Referrer-Policy"] == "no-referrer"


def test_deleting_the_conversation_ends_its_link(chat, anonymous):
    link = share(chat)
    chat.delete()
    assert public_page(anonymous, link).status_code == 404


def test_revoking_from_the_api_ends_the_link_and_sharing_again_makes_a_new_one(chat, anonymous):
    client = Client()
    client.force_login(chat.owner)
    url = reverse("chat:conversation-share", args=[chat.pk])

    made = client.post(url, json.dumps({"mode": "snapshot"}), content_type="application/json")
    assert made.status_code == 201
    first = made.json()["share"]
    assert first["url"].endswith(f"/s/{SharedConversation.objects.get().token}/")
    assert client.get(url).json()["share"]["url"] == first["url"]

    assert client.delete(url).status_code == 204
    assert client.get(url).json()["share"] is None
    assert anonymous.get(first["url"]).status_code == 404

    again = client.post(url, json.dumps({"mode": "live"}), content_type="application/json").json()["share"]
    assert again["url"] != first["url"]
    assert anonymous.get(again["url"]).status_code == 200
    assert anonymous.get(first["url"]).status_code == 404


def test_revoking_and_sharing_again_without_end_is_capped_at_the_plans_new_chats_a_day(chat):
    # Each revoke and share makes a new row; updating a working link makes none and is never counted.
    put_on_plan(chat.owner, "free", new_chats_per_day=2)
    for _ in range(2):
        share(chat)
        share(chat, mode="live")  # the same link, updated
        services.revoke_conversation_share(chat.owner, chat.pk)

    with pytest.raises(RateLimited) as refused:
        share(chat)

    assert (refused.value.status, refused.value.code) == (429, "shared_link_limit")
    assert refused.value.message == (
        "You made 2 new shared links in the last 24 hours, the most the Free plan allows (as many as new "
        "chats). You can make another in 24 hours, or upgrade to Plus for 500 a day."
    )
    assert SharedConversation.objects.count() == 2 and selectors.active_share(chat) is None


def test_sharing_again_updates_the_one_link_and_retakes_the_snapshot(chat, anonymous):
    first = share(chat)
    _q, a = chat.messages.order_by("created")
    exchange(chat, "A follow-up question", "A follow-up answer", parent=a)

    assert "A follow-up question" not in page_text(public_page(anonymous, first))
    again, created = services.share_conversation(chat.owner, chat.pk, mode="snapshot")

    assert not created and again.pk == first.pk and again.token == first.token
    assert SharedConversation.objects.count() == 1
    assert "A follow-up question" in page_text(public_page(anonymous, first))


# --- snapshot and live ---------------------------------------------------------------------------------------------


def test_a_snapshot_keeps_the_branch_shown_when_shared_and_a_live_link_follows(chat, anonymous):
    q, a = chat.messages.order_by("created")
    snapshot = share(chat, mode="snapshot")
    other = conversation_for(chat.owner, title="other")  # a second conversation, for a live link
    oq, oa = exchange(other, "Live question one", "Live answer one")
    live = share(other, mode="live")

    exchange(chat, "Later question", "Later answer", parent=a)
    say(chat, "assistant", "A regenerated first answer", parent=q)  # the current branch moves
    exchange(other, "Live question two", "Live answer two", parent=oa)
    say(other, "assistant", "Live answer one, regenerated", parent=oq)

    snap = page_text(public_page(anonymous, snapshot))
    assert "How long a **borrow** lives." in snap
    assert "Later question" not in snap and "regenerated" not in snap

    now = page_text(public_page(anonymous, live))
    # Live follows the conversation's current branch: the newest message's.
    assert "Live answer one, regenerated" in now
    assert "Live question two" not in now and "Live answer one<" not in now


def test_a_snapshot_of_an_older_branch_shares_that_branch(chat, anonymous):
    q, a = chat.messages.order_by("created")
    regenerated = say(chat, "assistant", "The second take on lifetimes", parent=q)

    link = share(chat, leaf_id=a.pk)

    text = page_text(public_page(anonymous, link))
    assert "How long a **borrow** lives." in text
    assert "second take" not in text
    assert link.message_ids == [q.pk, a.pk]
    assert regenerated.pk not in link.message_ids
    with pytest.raises(NotFound):
        services.share_conversation(chat.owner, chat.pk, leaf_id=10**9)


def test_only_finished_answers_are_shown(owner, anonymous):
    conversation = conversation_for(owner, title="Statuses")
    parent = None
    statuses = ["completed", "stopped", "pending", "streaming", "failed", "interrupted", "blocked"]
    for status in statuses:
        question = say(conversation, "user", f"question before {status}", parent=parent)
        parent = say(conversation, "assistant", f"answer that is {status}", parent=question, status=status)

    for mode in ("snapshot", "live"):
        link = share(conversation, mode=mode)
        text = page_text(public_page(anonymous, link))
        assert "answer that is completed" in text
        assert "answer that is stopped" in text
        for hidden in ("pending", "streaming", "failed", "interrupted", "blocked"):
            assert f"answer that is {hidden}" not in text, (mode, hidden)
        services.revoke_conversation_share(owner, conversation.pk)


def test_an_answer_finishing_after_a_snapshot_appears_once_it_is_done(owner, anonymous):
    conversation = conversation_for(owner)
    question = say(conversation, "user", "Tell me a story")
    answer = say(conversation, "assistant", "Once upon", parent=question, status=Message.Status.STREAMING)
    link = share(conversation)
    assert "Once upon" not in page_text(public_page(anonymous, link))

    Message.objects.filter(pk=answer.pk).update(status=Message.Status.COMPLETED, content="Once upon a time.")

    assert "Once upon a time." in page_text(public_page(anonymous, link))


# --- the owner's name, never the email -----------------------------------------------------------------------------


def test_the_owner_is_not_named_unless_they_choose(chat, anonymous):
    hidden = page_text(public_page(anonymous, share(chat, show_owner_name=False)))
    shown = page_text(public_page(anonymous, share(chat, show_owner_name=True)))

    assert "Ada Lovelace" not in hidden
    assert "Shared by" in shown and "Ada Lovelace" in shown
    for text in (hidden, shown):
        assert "ada.lovelace@example.com" not in text
        assert "ada.lovelace" not in text  # not even the part before the @


def test_without_a_display_name_choosing_to_be_named_shows_no_email(other_user, anonymous):
    conversation = conversation_for(other_user, title="Nameless")
    exchange(conversation, "q", "a")
    text = page_text(public_page(anonymous, share(conversation, show_owner_name=True)))
    assert "grace" not in text.lower()
    assert "Shared by" not in text


def test_the_dialog_is_told_which_name_would_be_shown(chat, other_user):
    client = Client()
    client.force_login(chat.owner)
    data = client.get(reverse("chat:conversation-share", args=[chat.pk])).json()
    assert data == {"share": None, "owner_name": "Ada Lovelace"}


# --- hostile text stays text ---------------------------------------------------------------------------------------


def test_html_in_a_shared_conversation_is_escaped_in_the_page(owner, anonymous):
    conversation = conversation_for(owner, title="<script>alert('title')</script>")
    exchange(conversation, "<img src=x onerror=alert(1)>", "<script>alert(2)</script> [x](javascript:alert(3))")

    text = page_text(public_page(anonymous, share(conversation)))

    assert "<script>alert" not in text
    assert "<img src=x" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in text


# --- the owner's list of links -------------------------------------------------------------------------------------


def test_the_owner_lists_their_links_and_revokes_one(chat, owner, anonymous, other_user, staff_user):
    link = share(chat, show_passages=True)
    other = conversation_for(owner, title="Taken")
    exchange(other, "q", "a")
    services.take_down(staff_user, [share(other)], "Copyright complaint")
    strangers = conversation_for(other_user, title="Not yours")
    exchange(strangers, "q", "a")
    share(strangers)
    client = Client()
    client.force_login(owner)

    page = client.get(reverse("account_shared_links"))

    text = page_text(page)
    assert "Rust lifetimes" in text and f"/s/{link.token}/" in text
    assert text.count("shows quoted passages") == 1  # the one link that chose to
    assert text.index("Rust lifetimes") < text.index("Taken down by staff")  # working links first
    assert "Taken down by staff" in text and "Copyright complaint" in text
    assert "Not yours" not in text
    assert staff_user.email not in text

    response = client.post(reverse("account_shared_links"), {"revoke": link.pk})
    assert response.status_code == 302
    assert public_page(anonymous, link).status_code == 404
    assert "Revoked on" in page_text(client.get(reverse("account_shared_links")))


# --- staff take links down ------------------------------------------------------------------------------------------


@pytest.fixture
def staff_admin(db):
    staff = make_staff("moderator@example.com", is_superuser=True)
    return staff, signed_in(staff)


def test_staff_take_a_link_down_from_the_admin_with_a_reason(chat, staff_admin, anonymous):
    staff, client = staff_admin
    link = share(chat)
    other = conversation_for(chat.owner, title="Another one")
    exchange(other, "q", "a")
    bystander = share(other)
    changelist = reverse("admin:chat_sharedconversation_changelist")

    listing = client.get(changelist)
    assert listing.status_code == 200
    assert f"/s/{link.token[:6]}…" in page_text(listing)
    assert link.token not in page_text(listing)  # staff see a prefix, not the whole link
    # Staff find the reported one by pasting its address.
    found = client.get(changelist, {"q": f"https://chat.example.com/s/{link.token}/"})
    assert f"/s/{link.token[:6]}…" in page_text(found)
    assert f"/s/{bystander.token[:6]}…" not in page_text(found)

    # The action first asks for a reason...
    asked = client.post(changelist, {"action": "take_down", ACTION_CHECKBOX_NAME: [link.pk]})
    assert asked.status_code == 200 and 'name="reason"' in page_text(asked)
    refused = client.post(
        changelist, {"action": "take_down", ACTION_CHECKBOX_NAME: [link.pk], "apply": "1", "reason": "   "}
    )
    assert "Give a reason" in page_text(refused)
    link.refresh_from_db()
    assert link.taken_down_at is None

    # ...then takes the link down, saying who did it.
    done = client.post(
        changelist,
        {"action": "take_down", ACTION_CHECKBOX_NAME: [link.pk], "apply": "1", "reason": "Doxxing report"},
        follow=True,
    )
    assert "Took down 1 link" in page_text(done) and staff.email in page_text(done)
    link.refresh_from_db()
    assert link.taken_down_by == staff and link.takedown_reason == "Doxxing report" and link.taken_down_at
    assert public_page(anonymous, link).status_code == 404

    # The owner cannot bring it back by sharing again, and is told why.
    with pytest.raises(NotAllowed, match="Doxxing report"):
        services.share_conversation(chat.owner, chat.pk)


def test_only_staff_can_take_a_link_down(chat, other_user):
    link = share(chat)
    with pytest.raises(NotAllowed):
        services.take_down(other_user, [link], "I do not like it")
    link.refresh_from_db()
    assert link.is_active


def test_the_public_page_is_two_queries(chat, anonymous, django_assert_max_num_queries):
    link = share(chat, mode="live")
    with django_assert_max_num_queries(2):
        selectors.shared_page(link.token)


# --- the quoted passages of the owner's files: shown only if the owner chooses ---------------------------------------

PASSAGE = "The ferry to the island leaves at seven, from the north pier."
LONG_PASSAGE = "The log of the lighthouse keeper, " + "one calm night after another, " * 30 + "ends here."


def cited_chat(owner, *, texts=(PASSAGE,), sources=None):
    """A conversation whose answer cites passages of the owner's file, as chat.generation stores them."""
    conversation = conversation_for(owner, title="Ferry times")
    document = Document.objects.create(
        owner=owner, conversation=conversation, name="timetable.pdf", file="documents/timetable.pdf", state="ready"
    )
    chunks = [
        Chunk.objects.create(document=document, owner=owner, ordinal=n, page=n + 2, text=text)
        for n, text in enumerate(texts)
    ]
    question = say(conversation, "user", "When does the ferry leave?")
    if sources is None:
        sources = [
            {
                "n": n + 1,
                "chunk_id": c.pk,
                "document_id": document.pk,
                "name": document.name,
                "page": c.page,
                "heading": "",
            }
            for n, c in enumerate(chunks)
        ]
    say(conversation, "assistant", "At seven [1].", parent=question, sources=sources)
    return conversation, document, chunks


def test_choosing_to_show_passages_is_kept_and_returned_by_the_api(chat):
    client = Client()
    client.force_login(chat.owner)
    url = reverse("chat:conversation-share", args=[chat.pk])

    made = client.post(url, json.dumps({"mode": "snapshot"}), content_type="application/json").json()["share"]
    assert made["show_passages"] is False  # off unless chosen
    chosen = client.post(url, json.dumps({"show_passages": True}), content_type="application/json")
    assert chosen.status_code == 200 and chosen.json()["share"]["show_passages"] is True
    assert SharedConversation.objects.get().show_passages is True
    assert client.get(url).json()["share"]["show_passages"] is True

    refused = client.post(url, json.dumps({"show_passages": "yes"}), content_type="application/json")
    assert refused.status_code == 400 and "show_passages must be true or false" in refused.content.decode()
    assert SharedConversation.objects.get().show_passages is True


def test_the_quoted_passage_is_shown_under_its_source_when_the_owner_chooses(owner, anonymous):
    conversation, _document, _chunks = cited_chat(owner, texts=(PASSAGE, LONG_PASSAGE))

    text = page_text(public_page(anonymous, share(conversation, show_passages=True)))

    assert "timetable.pdf" in text and "p. 2" in text
    assert PASSAGE in text
    assert LONG_PASSAGE in text  # whole, though folded away until opened
    assert "<details" in text  # the long one is folded; the page stays readable


def test_the_passages_are_not_in_the_page_unless_the_owner_chooses(owner, anonymous):
    conversation, _document, _chunks = cited_chat(owner)

    text = page_text(public_page(anonymous, share(conversation)))

    assert "timetable.pdf" in text  # the source is named, as before
    assert PASSAGE not in text
    assert "ferry to the island" not in text  # not even a part of it

    # Choosing, then changing one's mind: the link stops showing them.
    link = share(conversation, show_passages=True)
    assert PASSAGE in page_text(public_page(anonymous, link))
    share(conversation, show_passages=False)
    assert PASSAGE not in page_text(public_page(anonymous, link))


def test_a_deleted_files_passage_is_no_longer_shown(owner, anonymous):
    conversation, document, _chunks = cited_chat(owner)
    link = share(conversation, show_passages=True)

    document.delete()

    text = page_text(public_page(anonymous, link))
    assert "timetable.pdf" in text  # the answer still names what it cited
    assert PASSAGE not in text
    assert "no longer available" in text


def test_a_source_pointing_at_another_users_passage_never_shows_it(owner, other_user, anonymous):
    theirs = Document.objects.create(owner=other_user, name="diary.txt", file="documents/diary.txt", state="ready")
    secret = Chunk.objects.create(document=theirs, owner=other_user, ordinal=0, text="Grace's private diary entry.")
    forged = [
        {"n": 1, "chunk_id": secret.pk, "document_id": theirs.pk, "name": "diary.txt", "page": None, "heading": ""}
    ]
    conversation, _document, _chunks = cited_chat(owner, sources=forged)

    text = page_text(public_page(anonymous, share(conversation, show_passages=True)))

    assert "Grace's private diary" not in text
    assert "Grace&#x27;s private diary" not in text


def test_a_source_pointing_at_another_of_the_owners_files_shows_nothing(owner, anonymous):
    # The chunk is the owner's, but not of the file the source names: only what the answer cited is shown.
    elsewhere = Document.objects.create(owner=owner, name="other.txt", file="documents/other.txt", state="ready")
    unrelated = Chunk.objects.create(document=elsewhere, owner=owner, ordinal=0, text="An unrelated private note.")
    conversation, document, _chunks = cited_chat(owner)
    forged = [
        {
            "n": 1,
            "chunk_id": unrelated.pk,
            "document_id": document.pk,
            "name": "timetable.pdf",
            "page": 2,
            "heading": "",
        }
    ]
    Message.objects.filter(conversation=conversation, role="assistant").update(sources=forged)

    text = page_text(public_page(anonymous, share(conversation, show_passages=True)))

    assert "An unrelated private note" not in text


def test_passage_text_is_escaped_and_reads_in_its_own_direction(owner, anonymous):
    conversation, _document, _chunks = cited_chat(owner, texts=("<script>alert('passage')</script> العبّارة",))

    text = page_text(public_page(anonymous, share(conversation, show_passages=True)))

    assert "<script>alert('passage')" not in text
    assert "&lt;script&gt;alert(&#x27;passage&#x27;)&lt;/script&gt; العبّارة" in text
    assert 'dir="auto"' in text


def test_the_passages_of_a_whole_page_take_one_query(owner, anonymous, django_assert_max_num_queries):
    conversation, _document, _chunks = cited_chat(owner, texts=("first", "second", "third"))
    answer = Message.objects.get(conversation=conversation, role="assistant")
    parent = answer
    for n in range(5):  # more answers, each citing the three passages
        question = say(conversation, "user", f"And then {n}?", parent=parent)
        parent = say(conversation, "assistant", f"Then {n}.", parent=question, sources=answer.sources)
    link = share(conversation, mode="live", show_passages=True)

    with django_assert_max_num_queries(3):  # the link, the branch, every passage at once
        page = selectors.shared_page(link.token)

    passages = [source.passage for message in page.messages for source in message.sources]
    assert passages == ["first", "second", "third"] * 6
