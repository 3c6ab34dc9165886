"""Settings for the whole product, driven by environment variables.

Three profiles, chosen by DJANGO_PROFILE:
- "development" (default): runs with nothing installed — SQLite, in-process channel layer and
  cache, Celery tasks run inline, mail printed to the console.
- "test": like development, but on the real PostgreSQL and Redis named by DATABASE_URL and
  REDIS_URL (pytest sets both to the local servers).
- "production": DEBUG off, secrets and hosts required, HTTPS-only cookies and HSTS; passes
  `manage.py check --deploy`.
README.md documents every variable read here.
"""

import sysconfig
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
import limits
from csp.constants import NONCE
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_float, env_int, env_int_map, env_list, env_str
from config.logging import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
# The site's templates and static files: beside config/ in a checkout. The wheel carries them as data
# files (setup.py), installed under share/sglchat/ in its environment: used where there is no checkout.
SITE_FILES_DIR = (
    BASE_DIR if (BASE_DIR / "templates").is_dir() else Path(sysconfig.get_path("data")) / "share" / "sglchat"
)

PROFILE = env_str("DJANGO_PROFILE", "development")
if PROFILE not in {"development", "test", "production"}:
    raise ImproperlyConfigured(f"DJANGO_PROFILE must be development, test or production, not {PROFILE!r}")
PRODUCTION = PROFILE == "production"

DEBUG = env_bool("DEBUG", default=PROFILE == "development")
SITE_NAME = env_str("SITE_NAME", "SGLChat")

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY must be set in production (50+ random characters).")
    # Development and test only: production refused to start above without its own key.
    SECRET_KEY = "insecure-development-key-never-use-in-production-0123456789abcdef"  # nosec B105

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "" if PRODUCTION else "127.0.0.1,localhost,testserver")
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the host(s) the product is served on.")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# --- Applications -------------------------------------------------------------------------------

INSTALLED_APPS = [
    "daphne",
    "console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "accounts",
    "billing",
    "chat",
    "inference",
    "moderation",
    "documents",
    "review",
    "audit",
    "api",
    "evals",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Around everything else, so every /v1 answer (refusals included) gets the request id, the rate-limit
    # headers and CORS; and a preflight is answered before anything else runs.
    "api.middleware.api_headers",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language of the page: the browser's Accept-Language (or the language cookie); a signed-in
    # person's own choice replaces it below (accounts.middleware.UserLanguageMiddleware).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # After the CSRF check: a form or query string with a NUL gets 400 and a sentence (config/text.py).
    "config.text.UnstorableTextMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Before the CSRF check and every view read a body: one that is too large gets 413 and a sentence.
    "config.request_limits.RequestSizeLimitMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "accounts.middleware.UserLanguageMiddleware",
    "accounts.middleware.SuspendedUserMiddleware",
    "accounts.middleware.StaffTwoFactorMiddleware",
    "config.middleware.RefusalMiddleware",
    "config.overload.OverloadMiddleware",
]
#: The OpenAI-compatible API's chain (config/api_handler.py: what MIDDLEWARE has that /v1 needs, in the
#: same order; NOT_FOR_PROGRAMS there says why the rest is left out). Daphne runs both chains on the event
#: loop (config/loop_handler.py).
API_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "api.middleware.api_headers",
    "config.text.UnstorableTextMiddleware",
    "config.request_limits.RequestSizeLimitMiddleware",
    "config.middleware.RefusalMiddleware",
    "config.overload.OverloadMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [SITE_FILES_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "config.context_processors.site",
            ],
        },
    },
]

# --- Data stores ----------------------------------------------------------------------------------

DATABASE_URL = env_str("DATABASE_URL")
if not DATABASE_URL:
    if PROFILE != "development":
        raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL outside development.")
    (BASE_DIR / "var").mkdir(exist_ok=True)
    DATABASE_URL = f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0), conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The search index needs sqlite-vec, an extension this Python's sqlite3 may not be able to load.
    from config.sqlite_driver import use_one_that_loads_extensions

    use_one_that_loads_extensions()
    # The embedded default writes from several threads (requests, files being read, answers ending). A
    # transaction takes the write lock when it begins (waiting up to `timeout` seconds for another's
    # commit): a deferred one that read first was refused "database is locked" the moment another
    # writer committed. WAL lets reads go on while one writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"}
    )
# PostgreSQL through one pool of connections per process (Django's psycopg pool): a request borrows
# a connection and gives it back, instead of opening one per thread. A request that cannot borrow
# one within DATABASE_POOL_TIMEOUT_SECONDS is answered 503 "busy". With several processes, keep
# processes x DATABASE_POOL_MAX_SIZE under PostgreSQL's max_connections, or put PgBouncer between.
DATABASE_POOL = env_bool("DATABASE_POOL", default=True)
if DATABASE_POOL and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django must not
    # No "is it alive?" round trip each time a connection is borrowed: the pool drops connections that
    # come back broken, and a write that meets a dead one is retried (chat.generation.settle).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", 2),
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", 20),
        "timeout": env_int("DATABASE_POOL_TIMEOUT_SECONDS", 3),
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis carries the cache (rate limits, quotas), the channel layer, token streams and Celery.
# Without it (the embedded default) each of those falls back to an in-process implementation.
REDIS_URL = env_str("REDIS_URL")
if PRODUCTION and not REDIS_URL:
    raise ImproperlyConfigured("REDIS_URL must be set in production.")

# One pool of connections per process (config.redis); a request that cannot get a connection within
# REDIS_CONNECT_TIMEOUT_SECONDS is refused as busy rather than waiting on.
REDIS_MAX_CONNECTIONS = env_int("REDIS_MAX_CONNECTIONS", 100)
REDIS_CONNECT_TIMEOUT_SECONDS = env_int("REDIS_CONNECT_TIMEOUT_SECONDS", 2)

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "config.cache.SharedPoolRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "sglchat",
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "sglchat:ch"},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Celery -------------------------------------------------------------------------------------------

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = None
# With no broker (embedded default) and in tests, tasks run inline in the caller.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL or PROFILE == "test")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BEAT_SCHEDULE: dict = {
    "reap-stalled-generations": {"task": "chat.tasks.reap_stalled_generations", "schedule": 30.0},
    # The staff dashboard's chart of load over the last hour keeps each minute's peak of these samples.
    "console-record-service-load": {"task": "console.tasks.record_service_load", "schedule": 15.0},
    # A suspension for a period ends within a minute of its end.
    "accounts-end-expired-suspensions": {"task": "accounts.tasks.end_expired_suspensions", "schedule": 60.0},
}
# How often the running model rollouts are checked: a step's gates are judged within this of its window's end.
ROLLOUT_CHECK_SECONDS = env_int("ROLLOUT_CHECK_SECONDS", 30)
CELERY_BEAT_SCHEDULE["evals-advance-rollouts"] = {
    "task": "evals.tasks.advance_rollouts",
    "schedule": float(ROLLOUT_CHECK_SECONDS),
}
# The embedded default has no beat process, and its heartbeats, token streams and quota counters live
# in the one Daphne process's memory, so that process runs the schedule itself (config.embedded_beat).
# Never with more than one process: each would run every job.
EMBEDDED_BEAT = env_bool("EMBEDDED_BEAT", default=PROFILE == "development" and not REDIS_URL)

# --- Accounts -------------------------------------------------------------------------------------

AUTH_USER_MODEL = "accounts.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"

ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = env_str("ACCOUNT_EMAIL_VERIFICATION", "mandatory")
ACCOUNT_CONFIRM_EMAIL_ON_GET = False
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_SESSION_REMEMBER = None
ACCOUNT_EMAIL_SUBJECT_PREFIX = f"[{SITE_NAME}] "
# allauth's own limits: 5 failed passwords per account in 5 minutes (and 10 per IP per minute)
# lock further attempts with a clear form error; login and signup requests are also capped per IP.
ACCOUNT_RATE_LIMITS = {
    "login_failed": "10/m/ip,5/300s/key",
    "login": env_str("LOGIN_RATE_LIMIT", "30/m/ip"),
    "signup": env_str("SIGNUP_RATE_LIMIT", "10/m/ip"),
}

MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = SITE_NAME
# A code typed in the last second of its 30 s window arrives in the next: one step of drift is
# accepted (RFC 6238 section 5.2); allauth still refuses a code used once.
MFA_TOTP_TOLERANCE = 1
# The setup page keeps the secret it showed until it is activated (allauth draws a new one per visit).
MFA_FORMS = {"activate_totp": "accounts.forms.StableSecretActivateTOTPForm"}
# Staff must enrol a TOTP authenticator before they can use any page (accounts.middleware).
MFA_REQUIRED_FOR_STAFF = env_bool("MFA_REQUIRED_FOR_STAFF", default=True)

# OpenID Connect single sign-on, off unless OIDC_CLIENT_ID is set.
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID")
SOCIALACCOUNT_PROVIDERS: dict = {}
if OIDC_CLIENT_ID:
    SOCIALACCOUNT_PROVIDERS["openid_connect"] = {
        "OAUTH_PKCE_ENABLED": True,
        "APPS": [
            {
                "provider_id": env_str("OIDC_PROVIDER_ID", "sso"),
                "name": env_str("OIDC_PROVIDER_NAME", "Single sign-on"),
                "client_id": OIDC_CLIENT_ID,
                "secret": env_str("OIDC_CLIENT_SECRET"),
                "settings": {"server_url": env_str("OIDC_SERVER_URL")},
            }
        ],
    }
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_ONLY = False

# --- Mail --------------------------------------------------------------------------------------------

EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend" if PRODUCTION else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 587 if PRODUCTION else 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=PRODUCTION)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", f"{SITE_NAME} <noreply@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- Rate limits -------------------------------------------------------------------------------------
# The plans' requests per minute are moving windows (billing.services.rate_limits, on REDIS_URL or in
# process memory); django-ratelimit's fixed windows in the cache cap sign-in and sign-up by IP.
# RATELIMIT_ENABLE switches both.

RATELIMIT_USE_CACHE = "default"
RATELIMIT_ENABLE = env_bool("RATELIMIT_ENABLE", default=True)
# The in-process cache is not shared between processes; that is fine for the single-process
# embedded default, and Redis replaces it everywhere else.
SILENCED_SYSTEM_CHECKS = [] if REDIS_URL else ["django_ratelimit.E003", "django_ratelimit.W001"]
# Downloads of an account's whole data export (chat.data_export), per user, in a moving window
# (the `limits` library's notation: "3/hour", "10/day"). Each one reads every message the user has.
DATA_EXPORT_RATE_LIMIT = env_str("DATA_EXPORT_RATE_LIMIT", "3/hour")
try:
    limits.parse(DATA_EXPORT_RATE_LIMIT)
except ValueError as exc:
    raise ImproperlyConfigured(f"DATA_EXPORT_RATE_LIMIT must look like 3/hour, not {DATA_EXPORT_RATE_LIMIT!r}") from exc

# --- Static files, i18n ------------------------------------------------------------------------------

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [SITE_FILES_DIR / "static"]
# Uploaded files (people's documents) in the default storage: the local filesystem (MEDIA_ROOT), or an
# S3-compatible bucket through django-storages when FILES_S3_BUCKET is set (credentials from the standard
# AWS_* variables; FILES_S3_ENDPOINT_URL for MinIO, Ceph or another S3-compatible store). Files are
# never served from a public URL: the product reads them itself.
MEDIA_ROOT = env_str("MEDIA_ROOT", str(BASE_DIR / "var" / "media"))
FILES_S3_BUCKET = env_str("FILES_S3_BUCKET")
STORAGES = {
    "default": (
        {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": FILES_S3_BUCKET,
                "endpoint_url": env_str("FILES_S3_ENDPOINT_URL") or None,
                "region_name": env_str("FILES_S3_REGION") or None,
                "location": env_str("FILES_S3_PREFIX", "documents"),
                "default_acl": "private",
                "querystring_auth": True,
                "file_overwrite": False,
            },
        }
        if FILES_S3_BUCKET
        else {"BACKEND": "django.core.files.storage.FileSystemStorage"}
    ),
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION
if not PRODUCTION:
    STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns at start-up when it is missing

# The product's languages, each named in itself (the Settings page's choice). A person's own choice
# (User.language) wins; without one, the browser's Accept-Language picks (django.middleware.locale).
# Translations: locale/<code>/LC_MESSAGES/ (django.po for pages and sentences, djangojs.po for the chat's
# scripts), compiled .mo files committed so `make run` needs no gettext tools.
LANGUAGE_CODE = "en"
LANGUAGES = [
    ("en", "English"),
    ("fr", "Français"),
    ("de", "Deutsch"),
    ("es", "Español"),
    ("pt-br", "Português (Brasil)"),
    ("it", "Italiano"),
    ("ja", "日本語"),
    ("zh-hans", "简体中文"),
    ("ar", "العربية"),
]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Security (production) ---------------------------------------------------------------------------

# Sessions are read from the cache (Redis, when REDIS_URL is set) and written through to the
# database: a request costs no session query, and a session outlives a cache flush. config/sessions.py
# is Django's cached_db, remembering the key a cycle replaced (for the chat's WebSockets).
SESSION_ENGINE = "config.sessions"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the chat page's JS reads it to send CSRF-protected fetches
CSRF_FAILURE_VIEW = "config.views.csrf_failure"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy on every response (django-csp). Scripts and styles come only from our own
# static files: no inline script or style is allowed, except the chat's import map, which carries the
# request's nonce. Answers' images from elsewhere are not loaded (no tracking pixels in answers). Forms
# may lead only here, or to Stripe's checkout and customer portal (a redirect after a form post counts).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'", NONCE],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],  # same-origin fetch, SSE and WebSocket (CSP 3: 'self' covers ws/wss)
        "manifest-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'", "https://checkout.stripe.com", "https://billing.stripe.com"],
    }
}
if OIDC_CLIENT_ID and env_str("OIDC_SERVER_URL"):
    # The SSO button is a form whose answer redirects to the provider; browsers hold that redirect to
    # form-action too, so the provider's origin must be allowed (only while SSO is on).
    _provider = urlsplit(env_str("OIDC_SERVER_URL"))
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(f"{_provider.scheme}://{_provider.netloc}")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Cross-origin calls to the API (/v1 only; api/middleware.py): the origins whose pages may call it from a
# browser. Empty (the default): none. "*": any, never with credentials (the API takes a bearer key, not
# cookies, so none are ever allowed). Otherwise a comma-separated list of origins (scheme://host[:port]).
API_CORS_ORIGINS = env_list("API_CORS_ORIGINS")
for _origin in API_CORS_ORIGINS:
    if _origin == "*":
        if len(API_CORS_ORIGINS) > 1:
            raise ImproperlyConfigured("API_CORS_ORIGINS is either * alone or a list of origins, not both.")
        continue
    _parts = urlsplit(_origin)
    if _parts.scheme not in {"http", "https"} or not _parts.netloc or f"{_parts.scheme}://{_parts.netloc}" != _origin:
        raise ImproperlyConfigured(
            f"API_CORS_ORIGINS must list origins such as https://app.example.com (no path), not {_origin!r}"
        )
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=True)
    # Behind a TLS-terminating load balancer that sets X-Forwarded-Proto.
    if env_bool("TRUST_X_FORWARDED_PROTO", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Logging -------------------------------------------------------------------------------------------

LOGGING = logging_config(json_lines=env_bool("LOG_JSON", default=PRODUCTION), level=env_str("LOG_LEVEL", "INFO"))

# --- Inference (inference app) ---------------------------------------------------------------------
# The SGLang server (or SGLang Model Gateway) the product talks to. The embedded default starts a
# simulated worker on this address (`make run`).
SGLANG_URL = env_str("SGLANG_URL", "http://127.0.0.1:30000")
SGLANG_API_KEY = env_str("SGLANG_API_KEY")
# The models offered, `id=Display name`, comma-separated; all served by SGLANG_URL.
INFERENCE_MODELS = env_list("INFERENCE_MODELS", "sim-small=Simulated Small,sim-large=Simulated Large")
INFERENCE_CONTEXT_TOKENS = env_int("INFERENCE_CONTEXT_TOKENS", 8192)
# Models whose window differs from INFERENCE_CONTEXT_TOKENS, `id=tokens`, comma-separated.
INFERENCE_MODEL_CONTEXT_TOKENS = env_int_map("INFERENCE_MODEL_CONTEXT_TOKENS")
# Embedding models (SGLang servers started with --is-embedding), `id=Display name`, comma-separated:
# served at /v1/embeddings only, never offered for chat. Their windows come from the two settings above.
INFERENCE_EMBEDDING_MODELS = env_list("INFERENCE_EMBEDDING_MODELS", "")
if {i.partition("=")[0].strip() for i in INFERENCE_EMBEDDING_MODELS} & {
    i.partition("=")[0].strip() for i in INFERENCE_MODELS
}:
    raise ImproperlyConfigured("A model id is in both INFERENCE_MODELS and INFERENCE_EMBEDDING_MODELS.")
# The "Auto" model (chat.generation.auto_route): `small,large`, two ids of INFERENCE_MODELS. When set, Auto
# is offered first (in the page and /v1/models) and each turn goes to the small model unless it needs the
# large one (pictures, tools, a long context) or looks hard; staff set the share sent to the large one.
INFERENCE_AUTO_MODEL = env_list("INFERENCE_AUTO_MODEL", "")
if "auto" in {i.partition("=")[0].strip() for i in INFERENCE_MODELS + INFERENCE_EMBEDDING_MODELS}:
    raise ImproperlyConfigured("'auto' is the Auto model choice's id: no model of INFERENCE_MODELS may take it.")
if INFERENCE_AUTO_MODEL and (
    len(INFERENCE_AUTO_MODEL) != 2
    or len(set(INFERENCE_AUTO_MODEL)) != 2
    or not set(INFERENCE_AUTO_MODEL) <= {i.partition("=")[0].strip() for i in INFERENCE_MODELS}
):
    raise ImproperlyConfigured("INFERENCE_AUTO_MODEL names two different models of INFERENCE_MODELS: small,large.")
# The one embedding server, used for an embedding model that no node lists (the embedded default).
SGLANG_EMBEDDING_URL = env_str("SGLANG_EMBEDDING_URL")
# Files and retrieval (documents): the embedding model that indexes people's files and embeds their
# questions (one of INFERENCE_EMBEDDING_MODELS; empty: the first), and the size of its vectors, which the
# search index is built for.
RETRIEVAL_EMBEDDING_MODEL = env_str(
    "RETRIEVAL_EMBEDDING_MODEL",
    INFERENCE_EMBEDDING_MODELS[0].partition("=")[0].strip() if INFERENCE_EMBEDDING_MODELS else "",
)
RETRIEVAL_EMBEDDING_DIMENSIONS = env_int("RETRIEVAL_EMBEDDING_DIMENSIONS", 384)
# The most of a prompt's room (after the system prompts and the question) that passages of files may take;
# the history has the rest, and whatever the passages leave.
RETRIEVAL_PROMPT_SHARE_PERCENT = env_int("RETRIEVAL_PROMPT_SHARE_PERCENT", 50)
if not 0 <= RETRIEVAL_PROMPT_SHARE_PERCENT <= 100:
    raise ImproperlyConfigured("RETRIEVAL_PROMPT_SHARE_PERCENT must be between 0 and 100.")
# The least cosine similarity a passage found by meaning must have to be used: below it, files that have
# nothing to do with the question give nothing (and the answer says so). Depends on the embedding model:
# 0.25 suits the simulated one; models whose unrelated texts score higher (many do: 0.4 to 0.6) want more.
RETRIEVAL_MIN_SIMILARITY = env_float("RETRIEVAL_MIN_SIMILARITY", 0.25)
# Ingestion of people's files (documents.ingestion): texts embedded per request to the fleet (the page's
# progress moves once per batch, and a cancel is noticed between batches), the characters that count as
# one page of a file without pages (Plan.pages_per_month), and the threads that read files in the
# process when Celery runs tasks eagerly (documents.runner).
DOCUMENTS_EMBED_BATCH = env_int("DOCUMENTS_EMBED_BATCH", 32)
DOCUMENTS_CHARS_PER_PAGE = env_int("DOCUMENTS_CHARS_PER_PAGE", 3000)
DOCUMENTS_INGEST_THREADS = env_int("DOCUMENTS_INGEST_THREADS", 2)
# A file whose reading has not moved for this long is failed (its process died), never left in progress.
DOCUMENTS_STALLED_MINUTES = env_int("DOCUMENTS_STALLED_MINUTES", 15)
# "native" (SGLang's /generate, with the chat template applied here) or "openai" (/v1/chat/completions).
SGLANG_MODE = env_str("SGLANG_MODE", "native")
# Set when SGLANG_URL is an SGLang Model Gateway (smg): it has no /abort_request, so a stop closes
# the connection instead, and conversations are pinned with X-SMG-Routing-Key.
SGLANG_BEHIND_GATEWAY = env_bool("SGLANG_BEHIND_GATEWAY", default=False)
# The fleet (inference app; docs/OPERATIONS.md). Nodes are rows managed in the admin; INFERENCE_NODES
# (comma-separated base URLs, each optionally `name=url`) creates or updates rows at start-up. With
# neither, SGLANG_URL is the one node, named "default".
INFERENCE_NODES = env_list("INFERENCE_NODES")
# affinity (a conversation's turns on the node holding its prefix), least_loaded, round_robin, or gateway
# (everything to the SGLang Model Gateway at INFERENCE_GATEWAY_URL, which routes across its workers).
INFERENCE_ROUTING = env_str("INFERENCE_ROUTING", "gateway" if SGLANG_BEHIND_GATEWAY else "affinity")
INFERENCE_GATEWAY_URL = env_str("INFERENCE_GATEWAY_URL", "")
# Send each request's plan priority to SGLang (`priority`; premium 10, free 0), which orders its queue by
# it when started with --enable-priority-scheduling and ignores it otherwise; with
# --radix-eviction-policy priority too, it also evicts free prefixes from its KV cache before paid ones.
INFERENCE_SEND_PRIORITY = env_bool("INFERENCE_SEND_PRIORITY", default=True)
# The poller: every INFERENCE_POLL_SECONDS, /health (a node is down after DOWN_AFTER failures in a row,
# up again after UP_AFTER successes) and its load; a load sample older than SAMPLE_MAX_AGE is unknown.
INFERENCE_POLL_SECONDS = env_float("INFERENCE_POLL_SECONDS", 2.0)
INFERENCE_DOWN_AFTER = env_int("INFERENCE_DOWN_AFTER", 3)
INFERENCE_UP_AFTER = env_int("INFERENCE_UP_AFTER", 2)
INFERENCE_SAMPLE_MAX_AGE = env_float("INFERENCE_SAMPLE_MAX_AGE", 10.0)
# Each process reads the nodes at most this often (the path of a message never queries them itself).
INFERENCE_FLEET_REFRESH_SECONDS = env_float("INFERENCE_FLEET_REFRESH_SECONDS", 1.0)
# True when SGLANG_URL is the simulated worker (the embedded default): the chat page says so.
SGLANG_SIMULATED = env_bool("SGLANG_SIMULATED", default=PROFILE != "production")
# Generations in flight above which free-tier requests get 503, and above which all do.
ADMISSION_SOFT_LIMIT = env_int("ADMISSION_SOFT_LIMIT", 64)
ADMISSION_HARD_LIMIT = env_int("ADMISSION_HARD_LIMIT", 128)
# The engines' own load (from the nodes' polled samples): past SOFT, free-tier requests are refused (or
# served by their plan's fallback model) and the router passes a node over; past HARD, nobody is admitted.
ENGINE_SOFT_QUEUED_REQUESTS = env_int("ENGINE_SOFT_QUEUED_REQUESTS", 8)
ENGINE_HARD_QUEUED_REQUESTS = env_int("ENGINE_HARD_QUEUED_REQUESTS", 32)
ENGINE_SOFT_TOKEN_USAGE = env_float("ENGINE_SOFT_TOKEN_USAGE", 0.85)
ENGINE_HARD_TOKEN_USAGE = env_float("ENGINE_HARD_TOKEN_USAGE", 0.97)
# Above the hard threshold a premium request waits this long for a place before its 503.
# The response cache (chat/generation/response_cache.py): a repeated request whose answer its input
# decides is answered from the first answer. Redis in production, this process's memory otherwise.
RESPONSE_CACHE_ENABLED = env_bool("RESPONSE_CACHE_ENABLED", default=True)
RESPONSE_CACHE_TTL_SECONDS = env_int("RESPONSE_CACHE_TTL_SECONDS", 86_400)
RESPONSE_CACHE_MAX_ENTRIES = env_int("RESPONSE_CACHE_MAX_ENTRIES", 20_000)
RESPONSE_CACHE_MAX_ANSWER_CHARS = env_int("RESPONSE_CACHE_MAX_ANSWER_CHARS", 32_000)
# The semantic cache (chat/generation/semantic_cache.py; staff turn it on in the console): at most this
# many earlier questions are compared with a new one in each group (one person's, or the public FAQ's, for
# a model and its settings; the oldest dropped first), at most this many groups are kept (the least
# recently used dropped whole), and a question longer than this is never looked up (it rarely repeats).
SEMANTIC_CACHE_MAX_PER_SCOPE = env_int("SEMANTIC_CACHE_MAX_PER_SCOPE", 500)
SEMANTIC_CACHE_MAX_GROUPS = env_int("SEMANTIC_CACHE_MAX_GROUPS", 10_000)
SEMANTIC_CACHE_MAX_QUESTION_CHARS = env_int("SEMANTIC_CACHE_MAX_QUESTION_CHARS", 1000)
# The web chat's sampling temperature (empty: the engine's default, and no answer is cached; 0 makes
# answers repeatable, and repeated questions hit the response cache).
CHAT_TEMPERATURE: float | None = env_float("CHAT_TEMPERATURE", None)  # type: ignore[arg-type]
ADMISSION_PREMIUM_WAIT_SECONDS = env_float("ADMISSION_PREMIUM_WAIT_SECONDS", 10.0)
ADMISSION_WAIT_POLL_SECONDS = env_float("ADMISSION_WAIT_POLL_SECONDS", 0.25)
# Premium requests one process lets wait for a place at once; the next is refused at once (503).
ADMISSION_PREMIUM_WAITERS = env_int("ADMISSION_PREMIUM_WAITERS", 16)
# A web answer whose engines are busy before its first token waits and retries (readers see a countdown)
# for at most this long before it fails.
CHAT_BUSY_RETRY_SECONDS = env_int("CHAT_BUSY_RETRY_SECONDS", 120)
# A conversation stays on the node (and model version) it used for this long after its last turn.
ROUTING_WARM_SECONDS = env_int("ROUTING_WARM_SECONDS", 900)
# HTTP requests one process admits at once (counted until their response starts); beyond, 503 at once.
WEB_MAX_CONCURRENT_REQUESTS = env_int("WEB_MAX_CONCURRENT_REQUESTS", 128)
# New requests are refused (503) while the process's event loop runs this many ms late, smoothed (0: never).
WEB_MAX_LOOP_LAG_MS = env_int("WEB_MAX_LOOP_LAG_MS", 250)
# /metrics answers staff, or a scraper sending "Authorization: Bearer <METRICS_TOKEN>" (unset: staff only).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# Tracing (config/tracing.py): on when an OTLP endpoint is configured, with OpenTelemetry's own variables
# (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true: off).
TRACING = bool(
    env_str("OTEL_EXPORTER_OTLP_ENDPOINT") or env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
) and not env_bool("OTEL_SDK_DISABLED")
# The trace backend's page for one trace, "{trace_id}" in it (Jaeger: http://host:16686/trace/{trace_id}):
# the console links each answer's trace id there. Empty: the id is shown without a link.
TRACE_URL_TEMPLATE = env_str("TRACE_URL_TEMPLATE", "")
if TRACE_URL_TEMPLATE and "{trace_id}" not in TRACE_URL_TEMPLATE:
    raise ImproperlyConfigured("TRACE_URL_TEMPLATE must contain {trace_id}, where the trace's id goes")
# Idle keep-alive connections each process keeps to each engine (one shared client per process).
ENGINE_KEEPALIVE_CONNECTIONS = env_int("ENGINE_KEEPALIVE_CONNECTIONS", 256)
# After the first token (always sent at once), SGLang sends an answer's text this many tokens at a time
# (`sampling_params.stream_interval` on /generate): every chunk costs the engine and this server the
# same whatever it holds, so 4 relays a token for about half the CPU of 1 (docs/PERFORMANCE.md,
# "Relaying long answers") while text still arrives several times a second. 1: every token.
ENGINE_STREAM_INTERVAL = env_int("ENGINE_STREAM_INTERVAL", 4)
if ENGINE_STREAM_INTERVAL < 1:
    raise ImproperlyConfigured(f"ENGINE_STREAM_INTERVAL must be at least 1, not {ENGINE_STREAM_INTERVAL}")
# A hung engine ends the answer (failed, with its text so far) after this long without a first token
# (queueing on the engine included) or without the next one, instead of holding it open.
ENGINE_FIRST_TOKEN_TIMEOUT_SECONDS = env_float("ENGINE_FIRST_TOKEN_TIMEOUT_SECONDS", 120.0)
ENGINE_BETWEEN_TOKENS_TIMEOUT_SECONDS = env_float("ENGINE_BETWEEN_TOKENS_TIMEOUT_SECONDS", 60.0)

# The largest HTTP body or WebSocket frame accepted (413 beyond; config/request_limits.py). Django's own
# default, written down: a chat message (CHAT_MAX_MESSAGE_CHARS) or a long API conversation fits well within.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("REQUEST_MAX_BYTES", 2_621_440)
# The largest upload body the chat's file route takes (its route alone, config.edge.body_limit): at least
# the largest file any plan allows (Plan.max_file_bytes decides each person's, with its own 413 sentence).
DOCUMENTS_UPLOAD_MAX_BYTES = env_int("DOCUMENTS_UPLOAD_MAX_BYTES", 51 * 1024 * 1024)
# The largest WebSocket frame the chat answers with a 413 error frame. It must stay below Daphne's own
# limit (1 MiB by default: a larger frame makes Daphne drop the connection without a word); a chat
# command with the longest message (CHAT_MAX_MESSAGE_CHARS, even as JSON escapes) fits within.
WS_MAX_FRAME_BYTES = env_int("WS_MAX_FRAME_BYTES", 512 * 1024)

# --- Chat -----------------------------------------------------------------------------------------------
CHAT_MAX_MESSAGE_CHARS = env_int("CHAT_MAX_MESSAGE_CHARS", 32000)
# A chat's own system prompt, in characters (about a thousand tokens by default); beyond it: 413. Stored
# with every chat, and sent after the product's prompt and the owner's custom instructions.
CHAT_MAX_SYSTEM_PROMPT_CHARS = env_int("CHAT_MAX_SYSTEM_PROMPT_CHARS", 4000)
# Pinned first in every conversation without its own; identical bytes across users share SGLang's cache.
CHAT_DEFAULT_SYSTEM_PROMPT = env_str(
    "CHAT_DEFAULT_SYSTEM_PROMPT",
    "You are a helpful assistant. Answer clearly and concisely, and use Markdown for code and lists.",
)
# Text is sent to readers in frames at most this far apart (or every CHAT_FRAME_TOKENS of the engine's chunks).
CHAT_FRAME_INTERVAL_MS = env_int("CHAT_FRAME_INTERVAL_MS", 30)
CHAT_FRAME_TOKENS = env_int("CHAT_FRAME_TOKENS", 16)
# A generation whose heartbeat is older than this is taken for dead and marked interrupted.
CHAT_HEARTBEAT_TTL_SECONDS = env_int("CHAT_HEARTBEAT_TTL_SECONDS", 15)

# --- Moderation (moderation app; docs/moderation.md) ---------------------------------------------------
# The screening backends, in order, comma-separated: rules, openai, classifier, llm. Empty: nothing is screened.
MODERATION_BACKENDS = env_list("MODERATION_BACKENDS", "rules")
# What a backend that errors or times out means: "open" (let the text through, logged) or "closed" (block it).
MODERATION_FAIL_MODE = env_str("MODERATION_FAIL_MODE", "open")
if MODERATION_FAIL_MODE not in {"open", "closed"}:
    raise ImproperlyConfigured(f"MODERATION_FAIL_MODE must be open or closed, not {MODERATION_FAIL_MODE!r}")
# A streaming answer is screened every this many characters, and once more at its end.
MODERATION_WINDOW_CHARS = env_int("MODERATION_WINDOW_CHARS", 200)
# Seconds a remote backend (openai) may take for one verdict before the fail mode decides.
MODERATION_TIMEOUT_SECONDS = float(env_str("MODERATION_TIMEOUT_SECONDS", "2"))
# Any OpenAI-compatible moderation endpoint (the backend "openai"): the base URL (…/v1) and a key.
MODERATION_OPENAI_URL = env_str("MODERATION_OPENAI_URL", "https://api.openai.com/v1")
MODERATION_OPENAI_KEY = env_str("MODERATION_OPENAI_KEY")
MODERATION_OPENAI_MODEL = env_str("MODERATION_OPENAI_MODEL", "omni-moderation-latest")
# The guard model of the backend "llm" (Llama Guard 3 on SGLang): its engine (default SGLANG_URL) and model name.
MODERATION_LLM_URL = env_str("MODERATION_LLM_URL")
MODERATION_LLM_MODEL = env_str("MODERATION_LLM_MODEL", "meta-llama/Llama-Guard-3-8B")
# Category score at or above which the openai and classifier backends block (0..1).
MODERATION_THRESHOLD = float(env_str("MODERATION_THRESHOLD", "0.8"))
# Upheld flags after which a user is suspended automatically (0: never).
MODERATION_SUSPEND_AFTER_UPHELD = env_int("MODERATION_SUSPEND_AFTER_UPHELD", 3)

# --- Billing (billing app; docs/billing.md) ------------------------------------------------------------
from celery.schedules import crontab  # noqa: E402  (kept with the only section that schedules beat tasks)

# "dev" (the embedded default) changes plans on click and charges nothing; "stripe" takes payment, and is
# production's default: development payments give every plan away to anyone who signs up.
PAYMENT_PROVIDER = env_str("PAYMENT_PROVIDER", "stripe" if PRODUCTION else "dev")
if PAYMENT_PROVIDER not in {"dev", "stripe"}:
    raise ImproperlyConfigured(f"PAYMENT_PROVIDER must be dev or stripe, not {PAYMENT_PROVIDER!r}")
# The one way to run production on development payments: a demo that says so (the deploy check still fails).
PAYMENT_PROVIDER_DEV_IN_PRODUCTION = env_str("PAYMENT_PROVIDER_DEV_IN_PRODUCTION")
if PAYMENT_PROVIDER_DEV_IN_PRODUCTION not in {"", "demo"}:
    raise ImproperlyConfigured(
        f"PAYMENT_PROVIDER_DEV_IN_PRODUCTION must be demo or unset, not {PAYMENT_PROVIDER_DEV_IN_PRODUCTION!r}"
    )
if PRODUCTION and PAYMENT_PROVIDER == "dev" and PAYMENT_PROVIDER_DEV_IN_PRODUCTION != "demo":
    raise ImproperlyConfigured(
        "PAYMENT_PROVIDER=dev gives every plan away for nothing: production takes payment through Stripe "
        "(PAYMENT_PROVIDER=stripe with its keys and prices, docs/billing.md). Only a demo may run on development "
        "payments, with PAYMENT_PROVIDER_DEV_IN_PRODUCTION=demo (manage.py check --deploy still fails on it)."
    )
STRIPE_SECRET_KEY = env_str("STRIPE_SECRET_KEY")
STRIPE_WEBHOOK_SECRET = env_str("STRIPE_WEBHOOK_SECRET")
# Stripe's API address; only tests (a local stand-in) or a proxy change it.
STRIPE_API_BASE = env_str("STRIPE_API_BASE", "https://api.stripe.com")
# The Stripe price id of each paid plan: STRIPE_PRICE_<SLUG> for every slug in STRIPE_PRICED_PLANS.
STRIPE_PRICED_PLANS = env_list("STRIPE_PRICED_PLANS", "plus,pro")
STRIPE_PRICES = {slug: env_str(f"STRIPE_PRICE_{slug.upper().replace('-', '_')}") for slug in STRIPE_PRICED_PLANS}
if PAYMENT_PROVIDER == "stripe" and not (STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET and all(STRIPE_PRICES.values())):
    raise ImproperlyConfigured(
        "PAYMENT_PROVIDER=stripe needs STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET and a STRIPE_PRICE_<SLUG> "
        f"for each of {', '.join(STRIPE_PRICED_PLANS)}."
    )
# Cached prompt tokens (served from SGLang's prefix cache) count this many percent less against quotas.
BILLING_CACHED_TOKEN_DISCOUNT_PERCENT = env_int("BILLING_CACHED_TOKEN_DISCOUNT_PERCENT", 50)
if not 0 <= BILLING_CACHED_TOKEN_DISCOUNT_PERCENT <= 100:
    raise ImproperlyConfigured("BILLING_CACHED_TOKEN_DISCOUNT_PERCENT must be between 0 and 100.")
# Embedding input tokens count this many percent less against quotas than a chat's tokens.
BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT = env_int("BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT", 0)
if not 0 <= BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT <= 100:
    raise ImproperlyConfigured("BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT must be between 0 and 100.")
# A past-due subscription keeps its plan this many days after the failed payment, then drops to Free.
BILLING_PAST_DUE_GRACE_DAYS = env_int("BILLING_PAST_DUE_GRACE_DAYS", 7)
# A quota reservation that is never settled (its process died) stops holding tokens after this long.
BILLING_RESERVATION_TTL_SECONDS = env_int("BILLING_RESERVATION_TTL_SECONDS", 1800)

CELERY_BEAT_SCHEDULE.update(
    {
        # A poll a busy worker could not start within its interval is dropped: the next one is as good,
        # and a backlog run back to back would reach the down/up thresholds in a burst, not over intervals.
        "inference-poll-nodes": {
            "task": "inference.tasks.poll_nodes",
            "schedule": INFERENCE_POLL_SECONDS,
            "options": {"expires": INFERENCE_POLL_SECONDS},
        },
        "billing-roll-over-periods": {"task": "billing.tasks.roll_over_periods", "schedule": crontab(minute=5)},
        "billing-end-past-due-after-grace": {
            "task": "billing.tasks.end_past_due_after_grace",
            "schedule": crontab(minute=15),
        },
        "billing-reconcile-usage-counters": {
            "task": "billing.tasks.reconcile_usage_counters",
            "schedule": crontab(hour=3, minute=30),
        },
        "billing-retry-provider-events": {
            "task": "billing.tasks.retry_provider_events",
            "schedule": crontab(minute="*/5"),
        },
        # A file whose reading stopped moving (DOCUMENTS_STALLED_MINUTES) fails with a sentence.
        "documents-fail-stalled-ingestions": {"task": "documents.tasks.fail_stalled_ingestions", "schedule": 300.0},
    }
)

# --- API (api app; docs/api.md) ---------------------------------------------------------------------------
# A stored response of the Responses API (/v1/responses) is kept this many days, then purged nightly.
API_RESPONSES_RETENTION_DAYS = env_int("API_RESPONSES_RETENTION_DAYS", 30)
# Images in a chat completion's messages (image_url parts, data: URLs; inference/images.py): at most this many
# per request (400 beyond) and this many bytes each, decoded (413 beyond). 1.5 MiB keeps one image, base64
# encoded (about 2.1 MB), within the default REQUEST_MAX_BYTES; raise that too to take larger ones.
API_MAX_IMAGES = env_int("API_MAX_IMAGES", 8)
API_IMAGE_MAX_BYTES = env_int("API_IMAGE_MAX_BYTES", 1_572_864)
CELERY_BEAT_SCHEDULE["api-purge-expired-responses"] = {
    "task": "api.tasks.purge_expired_responses",
    "schedule": crontab(hour=4, minute=10),
}
