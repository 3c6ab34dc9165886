"""Events of the accounts app, sent after the change they announce is committed."""

from django.dispatch import Signal

#: A user was suspended (`user`). Receivers end what the user has running: open WebSockets, answers
#: being written (chat.suspension).
account_suspended = Signal()
