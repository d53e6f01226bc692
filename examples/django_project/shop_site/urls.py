"""POST /orders creates an order and enqueues its receipt, in one transaction; /admin/
shows the jobs (pgbaton.contrib.django.jobs)."""

from django.contrib import admin
from django.urls import path

from shop import views

urlpatterns = [path("orders", views.create_order), path("admin/", admin.site.urls)]
