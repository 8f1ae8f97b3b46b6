"""The benchmark site's URLs: the admin, which the actions scenario drives with a test client."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
