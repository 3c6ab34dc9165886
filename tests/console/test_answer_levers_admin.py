"""The console's settings of the answer path's levers. The Semantic cache page: one row, off until staff
save it on; saving it reaches the answer path at once (the policy is read from the shared cache, which
the save empties); the page says what the cache did last week and links to the thumbs-down given to its
answers. The Auto model page: the target share for the large model, read at once by the answer path."""

import html

import pytest
from django.urls import reverse

from chat.generation import auto_route, semantic_cache
from chat.models import SemanticCachePolicy

pytestmark = pytest.mark.django_db(transaction=True)


def test_staff_turn_it_on_and_the_answer_path_sees_it_at_once(admin_client):
    assert semantic_cache.policy().enabled is False  # read (and kept in the shared cache) before any row
    listing = admin_client.get(reverse("admin:chat_semanticcachepolicy_changelist"))
    assert listing.status_code == 302 and listing.url == reverse("admin:chat_semanticcachepolicy_add")

    saved = admin_client.post(
        reverse("admin:chat_semanticcachepolicy_add"),
        {"enabled": "on", "threshold": "0.93", "scope": "person"},
        follow=True,
    )

    assert saved.status_code == 200
    assert semantic_cache.policy() == semantic_cache.Policy(enabled=True, threshold=0.93, scope="person")
    page = admin_client.get(reverse("admin:chat_semanticcachepolicy_changelist"), follow=True)
    text = html.unescape(page.content.decode())
    assert "first answers in the web chat" in text and "thumbs-down on those" in text
    assert "message__cache_hit__exact=similar" in text
    assert admin_client.get(reverse("admin:chat_semanticcachepolicy_add")).status_code == 403  # one row only


def test_a_threshold_below_what_is_safe_is_refused_with_a_reason(admin_client):
    response = admin_client.post(
        reverse("admin:chat_semanticcachepolicy_add"), {"enabled": "on", "threshold": "0.5", "scope": "person"}
    )
    assert response.status_code == 200  # the form again, with its error
    assert "greater than or equal to 0.8" in response.content.decode()
    assert not SemanticCachePolicy.objects.exists()


def test_the_wrong_hit_reports_link_opens_the_feedback_list_filtered(admin_client):
    url = reverse("admin:chat_answerfeedback_changelist") + "?rating__exact=down&message__cache_hit__exact=similar"
    assert admin_client.get(url).status_code == 200


def test_staff_set_autos_target_share_and_the_answer_path_sees_it_at_once(admin_client, settings):
    settings.INFERENCE_AUTO_MODEL = ["sim-small", "sim-large"]
    assert auto_route.target_share() == pytest.approx(0.3)  # the default, kept in the shared cache

    response = admin_client.post(reverse("admin:chat_automodelpolicy_add"), {"large_share_percent": "40"}, follow=True)

    assert response.status_code == 200
    assert auto_route.target_share() == pytest.approx(0.4)
    page = html.unescape(
        admin_client.get(reverse("admin:chat_automodelpolicy_changelist"), follow=True).content.decode()
    )
    assert "Simulated Small (small) and Simulated Large (large)" in page
    assert "No web chat answer was routed by Auto" in page
