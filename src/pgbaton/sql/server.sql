-- The server and the session: which version answers, is it alive, LISTEN.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.
-- Each state change guards, in SQL, the state it leaves
-- (docs/explanation/state_machine.md).

-- name: server_version
SELECT current_setting('server_version_num')::int AS version_num,
       current_setting('server_version') AS version;

-- name: server_ping
-- The cheapest round trip: proves a session (the leader's, or a pooled one) still works.
SELECT 1 AS alive;

-- name: server_backend
-- Which server process answers: two client connections answered by one process go
-- through a transaction pool (pooling.py).
SELECT pg_backend_pid() AS pid, inet_server_port() AS port;

-- name: channel_listen
-- LISTEN for new jobs of the schema; the channel name is spliced in (an identifier).
LISTEN __channel__;

-- name: channel_listen_ended
-- LISTEN for the ends of awaited jobs (App.wait): payload the job's id.
LISTEN __ended_channel__;

-- name: channel_listen_cancelled
-- LISTEN for running jobs cancelled (the jobs_status_changed trigger): payload the
-- job's id. The worker that holds it stops it now, not at its next heartbeat.
LISTEN __cancelled_channel__;

-- name: channel_listen_echo_ddl
-- LISTEN on a worker's own echo channel (_sql.echo_channel), beside the cancels' on
-- the same session; the channel, an identifier, is filled in by the engine.
LISTEN {channel};

-- name: channel_echo
-- A worker's echo on its own channel (payload `echo:<worker id>:<n>`): heard back on
-- its LISTEN session, it shows that session still hears cancels. A session cut
-- off without an error (a dropped route, a lost peer) hears nothing and raises nothing
-- until TCP gives up, hours later (worker/echo.py). Its commit need not wait for the
-- disk (an echo lost in a crash is an echo unheard), so it holds the server's notify
-- lock no longer than a commit's own work.
SELECT pg_notify(%(channel)s, %(payload)s)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait;
