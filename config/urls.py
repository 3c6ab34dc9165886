"""The URL map: every app's pages and endpoints, mounted. Wiring, like config/asgi.py: one of the two
modules of config that import the apps, and that nothing imports (docs/ARCHITECTURE.md, "Layering")."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from accounts.views import api_key_revoke, api_keys, save_theme, settings_page
from api.fallback import unknown_endpoint
from chat.data_export.views import delete_account, your_data
from chat.sharing.views import shared_conversation, shared_links
from chat.views import chat_page, home
from config.metrics import metrics
from config.views import healthz, javascript_catalog
from documents.views import files_page
from inference.views import readyz
from moderation.views import warning_seen

handler500 = "config.overload.server_error"

urlpatterns = [
    path("", home, name="home"),
    path("c/<int:conversation_id>/", chat_page, name="chat-conversation"),
    path("chat/", include("chat.urls")),
    path("s/<slug:token>/", shared_conversation, name="shared-conversation"),
    path("v1/", include("api.urls")),
    path("v1", unknown_endpoint, name="api-root"),  # OpenAI's JSON 404, as for any path under /v1/
    path("jsi18n/<str:language>/", javascript_catalog, name="javascript-catalog"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url="/static/chat/icons/icon-192.png", permanent=True), name="favicon"),
    path("settings/", settings_page, name="settings"),
    path("settings/theme", save_theme, name="settings-theme"),
    path("accounts/api-keys/", api_keys, name="account_api_keys"),
    path("accounts/api-keys/<int:key_id>/revoke/", api_key_revoke, name="account_api_key_revoke"),
    path("accounts/shared-links/", shared_links, name="account_shared_links"),
    path("accounts/files/", files_page, name="account_files"),
    path("accounts/data/", your_data, name="account_data"),
    path("accounts/delete/", delete_account, name="account_delete"),
    path("accounts/warnings/<int:warning_id>/seen", warning_seen, name="account_warning_seen"),
    path("accounts/", include("allauth.urls")),
    path("billing/", include("billing.urls")),
    path("admin/", admin.site.urls),  # the staff console (console/site.py)
]
