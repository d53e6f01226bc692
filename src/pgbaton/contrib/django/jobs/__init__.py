"""Read-only Django admin views of pgbaton's jobs: add "pgbaton.contrib.django.jobs" to
INSTALLED_APPS (after "pgbaton.contrib.django" and "django.contrib.admin").

A separate app, without migrations, so that its unmanaged model never asks
`makemigrations` for one and projects without the admin carry no model at all.
"""
