from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext_lazy as _


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def _create_user(self, email: str, password: str | None, **fields) -> "User":
        if not email:
            raise ValueError("An email address is required.")
        user = self.model(email=self.normalize_email(email), **fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **fields) -> "User":
        fields.setdefault("is_staff", False)
        fields.setdefault("is_superuser", False)
        return self._create_user(email, password, **fields)

    def create_superuser(self, email: str, password: str | None = None, **fields) -> "User":
        fields["is_staff"] = True
        fields["is_superuser"] = True
        return self._create_user(email, password, **fields)

    def get_by_natural_key(self, username: str) -> "User":
        # Email addresses are matched without regard to case, as people type them.
        return self.get(email__iexact=username)


class User(AbstractBaseUser, PermissionsMixin):
    """A person who signs in with an email address."""

    email = models.EmailField("email address", unique=True)
    display_name = models.CharField(max_length=150, blank=True)
    is_staff = models.BooleanField(default=False, help_text="Can use the staff console and the Django admin.")
    is_active = models.BooleanField(default=True)
    date_joined = models.DateTimeField(default=timezone.now)

    is_suspended = models.BooleanField(default=False, help_text="A suspended user cannot sign in or use the product.")
    suspended_reason = models.CharField(max_length=500, blank=True)
    suspended_at = models.DateTimeField(null=True, blank=True)
    suspended_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a suspension for a period ends by itself (empty: until staff lift it).",
    )
    banned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Banned: suspended for good, API keys revoked, subscription cancelled. Only a superuser lifts it.",
    )
    sessions_ended_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When every session of this user was last ended (at reinstatement after a suspension).",
    )

    # Settings the person chooses on the Settings page (accounts.settings decides the rules).
    class Theme(models.TextChoices):
        SYSTEM = "system", _("Same as the device")
        LIGHT = "light", _("Light")
        DARK = "dark", _("Dark")

    theme = models.CharField(max_length=8, choices=Theme.choices, default=Theme.SYSTEM)
    #: A code of settings.LANGUAGES, or "" for the browser's (Accept-Language).
    language = models.CharField(max_length=16, blank=True, default="")
    default_model = models.CharField(
        max_length=100, blank=True, help_text="The model new chats start with (when the plan allows it)."
    )
    custom_instructions = models.TextField(
        blank=True,
        help_text="Added to every web chat after the product's own prompt (never to API calls).",
    )

    objects = UserManager()

    EMAIL_FIELD = "email"
    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    class Meta:
        verbose_name = "user"
        verbose_name_plural = "users"
        permissions = [("suspend_user", "Can suspend and reinstate users")]

    def __str__(self) -> str:
        return self.email

    def _get_session_auth_hash(self, secret=None) -> str:
        """What a session's sign-in is checked against (Django ends a session whose hash no longer
        matches). Moving `sessions_ended_at` ends every session signed in before it, wherever it is
        open; while it is unset the hash is Django's own, so adding the field signed no one out."""
        password_hash = super()._get_session_auth_hash(secret=secret)
        if self.sessions_ended_at is None:
            return password_hash
        return salted_hmac(
            "accounts.User.sessions_ended_at",
            f"{password_hash}:{self.sessions_ended_at.isoformat()}",
            secret=secret,
            algorithm="sha256",
        ).hexdigest()

    def get_full_name(self) -> str:
        return self.display_name or self.email

    def get_short_name(self) -> str:
        return self.display_name or self.email.split("@", 1)[0]


class ApiKey(models.Model):
    """A key a program uses instead of a session. Only its hash is kept; the key is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The key's first characters, to tell keys apart.")
    hashed_key = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class PendingTotpSecret(models.Model):
    """The TOTP secret a user's authenticator setup has shown and that is not activated yet.

    allauth keeps it in the browser session, so a QR code scanned in one session failed in the next
    (a new sign-in drew a new secret). Kept per account instead, until activation deletes it
    (accounts.two_factor).
    """

    user = models.OneToOneField(User, on_delete=models.CASCADE, primary_key=True, related_name="pending_totp_secret")
    secret = models.TextField(help_text="Stored as allauth stores an activated authenticator's secret (mfa encrypt).")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "TOTP secret pending activation"

    def __str__(self) -> str:
        return f"TOTP secret pending activation for {self.user}"
