"""pgbaton inside other frameworks' projects (django: an app for INSTALLED_APPS)."""
