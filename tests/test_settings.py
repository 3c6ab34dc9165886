"""The settings module: production profile passes the deploy checks; development needs nothing."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_PROFILE", "DEBUG"}}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


#: What production needs besides its payment provider (the Makefile's check-deploy sets the same).
PRODUCTION = {
    "DJANGO_PROFILE": "production",
    "SECRET_KEY": "p" * 20 + "-a-long-random-secret-for-the-deploy-check-0123456789",
    "ALLOWED_HOSTS": "chat.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
    "REDIS_URL": "redis://127.0.0.1:6379/1",
}
#: Stripe as production's payment provider, with placeholders (nothing here calls Stripe).
STRIPE = {
    "PAYMENT_PROVIDER": "stripe",
    "STRIPE_SECRET_KEY": "sk_live_placeholder",
    "STRIPE_WEBHOOK_SECRET": "whsec_placeholder",
    "STRIPE_PRICE_PLUS": "price_plus_placeholder",
    "STRIPE_PRICE_PRO": "price_pro_placeholder",
}
DEV_PAYMENTS_DEMO = {"PAYMENT_PROVIDER": "dev", "PAYMENT_PROVIDER_DEV_IN_PRODUCTION": "demo"}


def test_production_profile_passes_check_deploy_with_no_warnings():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION, **STRIPE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_refuses_to_start_on_development_payments():
    # Named, without the opt-in: every plan would be free to anyone.
    named = run_manage("check", **PRODUCTION, PAYMENT_PROVIDER="dev")
    assert named.returncode != 0
    assert "PAYMENT_PROVIDER=dev gives every plan away" in named.stderr
    assert "PAYMENT_PROVIDER_DEV_IN_PRODUCTION=demo" in named.stderr
    # Unset: production's provider is Stripe, which will not start without its keys and prices.
    unset = run_manage("check", **PRODUCTION)
    assert unset.returncode != 0
    assert "PAYMENT_PROVIDER=stripe needs STRIPE_SECRET_KEY" in unset.stderr
    # An opt-in other than the one word is refused too.
    vague = run_manage("check", **PRODUCTION, PAYMENT_PROVIDER="dev", PAYMENT_PROVIDER_DEV_IN_PRODUCTION="yes")
    assert vague.returncode != 0
    assert "PAYMENT_PROVIDER_DEV_IN_PRODUCTION must be demo" in vague.stderr
    # With Stripe configured it starts.
    stripe = run_manage("check", **PRODUCTION, **STRIPE)
    assert stripe.returncode == 0, stripe.stderr


def test_a_demo_on_development_payments_starts_but_fails_the_deploy_check():
    started = run_manage("check", **PRODUCTION, **DEV_PAYMENTS_DEMO)
    assert started.returncode == 0, started.stderr

    for fail_level in ("WARNING", "ERROR"):
        deploy = run_manage("check", "--deploy", "--fail-level", fail_level, **PRODUCTION, **DEV_PAYMENTS_DEMO)
        assert deploy.returncode != 0, fail_level
        assert "billing.E001" in deploy.stderr and "gives every plan away" in deploy.stderr


def test_make_check_deploy_passes_on_its_own_settings():
    """`make check-deploy` names Stripe with placeholders: the deploy checks pass on what production needs.
    (-o: the virtualenv is taken as installed, so the test never runs pip.)"""
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_PROFILE", "DEBUG"}}
    result = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-o",
            ".venv/.installed",
            "check-deploy",
            f"BIN={Path(sys.executable).parent}",
        ],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_profile_refuses_to_start_without_a_secret_key():
    result = run_manage(
        "check",
        DJANGO_PROFILE="production",
        ALLOWED_HOSTS="chat.example.com",
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres",
        REDIS_URL="redis://127.0.0.1:6379/1",
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set in production" in result.stderr


def test_development_profile_needs_no_database_server_or_redis():
    result = run_manage(
        "shell",
        "-v",
        "0",
        "-c",
        (
            "from django.conf import settings as s;"
            "print(s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'],"
            " s.CELERY_TASK_ALWAYS_EAGER)"
        ),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
        "True",
    ]


def test_a_malformed_boolean_setting_is_refused_with_its_name():
    result = run_manage("check", DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG must be true or false" in result.stderr


def test_per_model_context_windows_are_read_and_a_malformed_one_is_refused_with_its_name():
    shown = run_manage(
        "shell",
        "-c",
        "from inference.catalogue import available_models; print([(m.id, m.context_tokens) for m in available_models()])",
        INFERENCE_CONTEXT_TOKENS="8192",
        INFERENCE_MODEL_CONTEXT_TOKENS="sim-large=32768",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().splitlines()[-1] == "[('sim-small', 8192), ('sim-large', 32768)]"
    refused = run_manage("check", INFERENCE_MODEL_CONTEXT_TOKENS="sim-large=lots")
    assert refused.returncode != 0
    assert "INFERENCE_MODEL_CONTEXT_TOKENS must list name=whole number pairs" in refused.stderr


def test_the_beat_schedule_runs_in_process_only_on_the_embedded_default():
    show = ("shell", "-v", "0", "-c", "from django.conf import settings as s; print(s.EMBEDDED_BEAT)")
    postgres = "postgres://postgres@127.0.0.1:5432/postgres"
    production = {
        "DJANGO_PROFILE": "production",
        "SECRET_KEY": "p" * 60,
        "ALLOWED_HOSTS": "chat.example.com",
        "DATABASE_URL": postgres,
        "REDIS_URL": "redis://127.0.0.1:6379/1",
        **STRIPE,
    }

    def embedded_beat(**env: str) -> str:
        result = run_manage(*show, **env)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert embedded_beat() == "True"  # `make run`: no Redis, no Celery beat
    assert embedded_beat(REDIS_URL="redis://127.0.0.1:6379/1") == "False"  # Celery beat runs beside Daphne
    assert embedded_beat(DJANGO_PROFILE="test", DATABASE_URL=postgres) == "False"
    assert embedded_beat(**production) == "False"
    assert embedded_beat(EMBEDDED_BEAT="false") == "False"


def test_with_single_sign_on_forms_may_lead_to_the_identity_provider():
    """The SSO button is a form whose answer redirects to the provider, and browsers hold redirects after
    a form to the policy's form-action: the provider's origin must be in it, and only when SSO is on."""
    show = (
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings as s; print(' '.join(s.CONTENT_SECURITY_POLICY['DIRECTIVES']['form-action']))",
    )
    sso = run_manage(*show, OIDC_CLIENT_ID="sglchat", OIDC_SERVER_URL="https://id.example.com:8443/realms/staff")
    assert sso.returncode == 0, sso.stderr
    assert sso.stdout.split() == [
        "'self'",
        "https://checkout.stripe.com",
        "https://billing.stripe.com",
        "https://id.example.com:8443",
    ]
    without = run_manage(*show)
    assert without.returncode == 0, without.stderr
    assert "id.example.com" not in without.stdout


def test_api_cors_origins_are_read_and_a_malformed_list_is_refused_with_its_name():
    shown = run_manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.API_CORS_ORIGINS)",
        API_CORS_ORIGINS="https://app.example.com, http://localhost:3000",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().splitlines()[-1] == "['https://app.example.com', 'http://localhost:3000']"
    # With CORS open to any origin, production still passes its deploy checks.
    deploy = run_manage("check", "--deploy", "--fail-level", "WARNING", API_CORS_ORIGINS="*", **PRODUCTION, **STRIPE)
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    for wrong in ("https://app.example.com/", "app.example.com", "*,https://app.example.com"):
        refused = run_manage("check", API_CORS_ORIGINS=wrong)
        assert refused.returncode != 0 and "API_CORS_ORIGINS" in refused.stderr, wrong


def test_tracing_is_on_only_with_an_otlp_endpoint_and_the_trace_link_needs_its_placeholder():
    def tracing(**env: str) -> str:
        shown = run_manage("shell", "-c", "from django.conf import settings; print(settings.TRACING)", **env)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.strip().splitlines()[-1]

    assert tracing() == "False"
    assert tracing(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318") == "True"
    assert tracing(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:4318/v1/traces") == "True"
    assert tracing(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_SDK_DISABLED="true") == "False"
    refused = run_manage("check", TRACE_URL_TEMPLATE="http://127.0.0.1:16686/trace/")
    assert refused.returncode != 0 and "TRACE_URL_TEMPLATE must contain {trace_id}" in refused.stderr
