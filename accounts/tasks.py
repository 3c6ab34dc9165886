from celery import shared_task
from django.core.mail import EmailMultiAlternatives

from accounts import services


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_email(subject: str, body: str, from_email: str, to: list[str], html: str | None = None) -> None:
    """Deliver an already rendered message, so a slow or failing mail server never blocks a page."""
    message = EmailMultiAlternatives(subject, body, from_email, to)
    if html:
        message.attach_alternative(html, "text/html")
    message.send()


@shared_task
def end_expired_suspensions() -> int:
    """Lift the suspensions whose period has ended (on the beat, every minute)."""
    return len(services.end_expired_suspensions())
