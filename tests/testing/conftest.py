"""The example project is a user's project: it runs under pytester, not in this suite."""

collect_ignore = ["example_project"]
