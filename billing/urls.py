from django.urls import path

from billing import views

app_name = "billing"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("plans/", views.plans, name="plans"),
    path("plans/<slug:slug>/choose/", views.choose_plan, name="choose_plan"),
    path("plans/keep/", views.keep_plan, name="keep_plan"),
    path("checkout/done/", views.checkout_done, name="checkout_done"),
    path("portal/", views.portal, name="portal"),
    path("usage/", views.usage, name="usage"),
    path("stripe/webhook/", views.stripe_webhook, name="stripe_webhook"),
]
