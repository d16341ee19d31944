"""URLs of the example project: the admin and the checkout view."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from example_project.shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("checkout/", views.checkout, name="checkout"),
]
