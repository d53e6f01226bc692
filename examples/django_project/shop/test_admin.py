"""The jobs in Django's admin (pgbaton.contrib.django.jobs), through Django's test client
on the real database: the list and its filters, one job, retry and cancel through
pgbaton's statements, and searches meant to break it."""

from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import TransactionTestCase
from pgbaton.contrib.django import pgbaton_settings

from shop.jobs import send_receipt

LIST = "/admin/pgbaton_jobs/job/"


def jobs_table() -> str:
    return f'"{pgbaton_settings().schema}".jobs'


def add_job(task: str, status: str = "pending", queue: str = "default", **columns) -> int:
    """A job row as pgbaton's statements would leave it in `status` (written in SQL here
    only to set the scene: the admin itself never writes a job)."""
    values = {"task": task, "queue": queue, "status": status, **columns}
    if status == "running":
        values.update(claim_token="00000000-0000-0000-0000-000000000001",
                      lease_until="2999-01-01T00:00:00Z", attempts=1, worker_id="w-1")
    if status in ("done", "failed", "cancelled"):
        values.setdefault("finished_at", "2026-01-01T00:00:00Z")
    if status == "failed":
        values.update(attempts=values.get("max_attempts", 5))
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {jobs_table()} ({names}) VALUES ({marks}) RETURNING id",
            list(values.values()),
        )
        return int(cursor.fetchone()[0])


def statuses() -> dict[int, str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, status FROM {jobs_table()}")
        return dict(cursor.fetchall())


class JobsInTheAdmin(TransactionTestCase):
    """Real commits: the admin's actions run on pgbaton's own connection."""

    def setUp(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {jobs_table()}")
        self.admin = User.objects.create_superuser("boss", "boss@example.com", "pw")
        self.client.force_login(self.admin)

    def ids_listed(self, query: str = "") -> list[int]:
        response = self.client.get(LIST + query)
        self.assertEqual(response.status_code, 200, response.content[:500])
        return [job.id for job in response.context["cl"].result_list]

    def test_the_list_filters_by_status_queue_and_task(self) -> None:
        pending = add_job("send_receipt")
        failed = add_job("send_receipt", "failed")
        mail = add_job("send_mail", queue="mail")
        self.assertEqual(self.ids_listed(), [mail, failed, pending])
        self.assertEqual(self.ids_listed("?status__exact=failed"), [failed])
        self.assertEqual(self.ids_listed("?queue=mail"), [mail])
        self.assertEqual(self.ids_listed("?task=send_receipt"), [failed, pending])
        self.assertEqual(self.ids_listed("?status__exact=nonsense"), [])
        response = self.client.get(LIST)
        for choice in (b"send_mail", b"mail", b"failed"):
            self.assertIn(choice, response.content)  # offered in the filters

    def test_one_job_shows_its_data_escaped(self) -> None:
        """args and every attempt's error are shown as text, never as markup."""
        job_id = add_job(
            "send_receipt", "failed", args='{"order_id": 7}',
            errors='[{"attempt": 1, "error": "<script>alert(1)</script>"}]',
        )
        response = self.client.get(f"{LIST}{job_id}/change/")
        self.assertEqual(response.status_code, 200)
        page = response.content.decode()
        self.assertIn("&quot;order_id&quot;: 7", page)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", page)
        self.assertNotIn("<script>alert(1)</script>", page)
        self.assertNotIn('name="_save"', page)  # read-only: no form to save
        self.assertEqual(self.client.get(f"{LIST}{job_id + 1000}/change/").status_code, 302)
        self.assertEqual(self.client.get(f"{LIST}abc/change/").status_code, 302)

    def test_nothing_can_be_added_changed_or_deleted(self) -> None:
        job_id = add_job("send_receipt")
        self.assertEqual(self.client.get(f"{LIST}add/").status_code, 403)
        posted = self.client.post(f"{LIST}{job_id}/change/", {"status": "done"})
        self.assertEqual(posted.status_code, 403)
        self.assertEqual(self.client.get(f"{LIST}{job_id}/delete/").status_code, 403)
        deleted = self.client.post(LIST, {"action": "delete_selected", "_selected_action":
                                          [job_id], "post": "yes"})
        self.assertIn(deleted.status_code, (200, 302))
        self.assertEqual(statuses(), {job_id: "pending"})

    def test_retry_and_cancel_go_through_pgbatons_statements(self) -> None:
        """Only the jobs each statement allows change; the rest are counted and named."""
        failed = add_job("send_receipt", "failed")
        done = add_job("send_receipt", "done")
        pending = add_job("send_receipt")
        running = add_job("send_receipt", "running")
        response = self.client.post(
            LIST, {"action": "retry_jobs", "_selected_action": [failed, done]}, follow=True
        )
        shown = [str(message) for message in response.context["messages"]]
        self.assertEqual(shown, [
            "Retried 1 of 2 job(s).",
            "1 job(s) left as they were: only failed or cancelled jobs can be retried.",
        ])
        self.client.post(LIST, {"action": "cancel_jobs",
                                "_selected_action": [pending, running, done]})
        self.assertEqual(statuses(), {failed: "pending", done: "done", pending: "cancelled",
                                      running: "cancelled"})
        with connection.cursor() as cursor:
            # job_retry's fence: a fresh set of attempts; job_cancel's: a running job
            # keeps its holder's token until the holder lets go.
            cursor.execute(f"SELECT attempts, claim_token FROM {jobs_table()} WHERE id IN"
                           " (%s, %s) ORDER BY id", [failed, running])
            self.assertEqual([(row[0], row[1] is not None) for row in cursor.fetchall()],
                             [(0, False), (1, True)])

    def test_a_viewer_without_the_change_permission_cannot_act(self) -> None:
        job_id = add_job("send_receipt")
        viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
        viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
        self.client.force_login(viewer)
        self.assertEqual(self.ids_listed(), [job_id])
        response = self.client.get(LIST)
        self.assertNotIn(b"cancel_jobs", response.content)
        self.client.post(LIST, {"action": "cancel_jobs", "_selected_action": [job_id]})
        self.assertEqual(statuses(), {job_id: "pending"})

    def test_hostile_searches_match_literally_or_are_refused(self) -> None:
        plain = add_job("charge")
        odd = add_job("100%_done'; DROP TABLE x; --", key="k\\ey")
        self.assertEqual(self.ids_listed("?q=%25_"), [odd])  # % and _ are not wildcards
        self.assertEqual(self.ids_listed("?q=%27%3B+DROP"), [odd])
        self.assertEqual(self.ids_listed("?q=k%5Cey"), [odd])
        self.assertEqual(self.ids_listed("?q=charge"), [plain])
        self.assertEqual(self.ids_listed("?q=" + "x" * 5000), [])
        self.assertEqual(self.ids_listed("?q=%F0%9F%92%A5+%E2%80%AE"), [])
        response = self.client.get(LIST + "?q=a%00b")
        self.assertEqual(response.status_code, 200)
        # Django's admin search form (4.2 and 5.x) refuses it with one message; the page
        # does not fail on PostgreSQL's "text cannot hold NUL".
        shown = [str(message) for message in response.context["messages"]]
        self.assertEqual(len(shown), 1)
        self.assertIn("null characters", shown[0].lower())
        self.assertEqual(len(statuses()), 2)

    def test_the_shops_task_is_listed_after_a_real_enqueue(self) -> None:
        job_id = send_receipt.using(conn=connection).defer(order_id=3)
        self.assertEqual(self.ids_listed("?task=send_receipt"), [job_id])
