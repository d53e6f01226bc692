/*
 * The claim protocol of pgbaton, model-checked with spin: 3 workers, 2 jobs, an abstract
 * clock that runs leases out, a reaper. `make model` checks it;
 * docs/explanation/model/README.md says what is proven and how each transition maps to
 * the SQL.
 *
 * Every transition below is one statement of src/pgbaton/sql/jobs.sql and is atomic,
 * as the statement is: its WHERE clause is the guard, its SET the effect.
 *
 * Built with -DNO_TOKEN_CHECK, the worker's writes are guarded by the status alone: that
 * mutant must fail the safety check (a stalled worker completes a job that was reaped and
 * claimed again), which shows the model catches the bug the token exists to prevent.
 */

#define WORKERS        3
#define JOBS           2
#define MAX_ATTEMPTS   2
#define LEASE          1     /* ticks of the abstract clock a claim or heartbeat buys */
#define HEARTBEATS     1     /* heartbeats per claim: every handler finishes some time */

#define PENDING  0
#define RUNNING  1
#define DONE     2
#define FAILED   3

#define NONE     0           /* claim_token IS NULL */

byte status[JOBS];
byte token[JOBS];            /* claim_token: 0 is NULL, else the number of the claim */
byte attempts[JOBS];
byte lease[JOBS];            /* ticks left before lease_until < now() */
byte claims = 0;             /* claims so far: a token (its claim's random half and job id) never repeats */

/* Ghost state, read only by the assertions: the claim each job last handed out.
 * Unlike token[], the reaper does not clear it. */
byte current_claim[JOBS];

#define final(j)      (status[j] == DONE || status[j] == FAILED)
#define all_final     (final(0) && final(1))

#ifdef NO_TOKEN_CHECK
#define held(j, t)    (status[j] == RUNNING)
#else
#define held(j, t)    (status[j] == RUNNING && token[j] == t)
#endif

/* Invariants of docs/explanation/state_machine.md, checked between any two statements. */
#define job_ok(j)     (attempts[j] <= MAX_ATTEMPTS \
                       && ((status[j] == RUNNING) == (token[j] != NONE)))

active proctype invariants()
{
end:
    atomic { !(job_ok(0) && job_ok(1)) -> assert(false) }
}

/* job_claim_many: status = 'pending' (SKIP LOCKED: the statement is atomic per row);
 * a new token, attempts + 1, a fresh lease. */
inline claim(j, t)
{
    status[j] == PENDING ->
        claims++;
        t = claims;
        token[j] = t;
        current_claim[j] = t;
        status[j] = RUNNING;
        attempts[j]++;
        lease[j] = LEASE
}

proctype worker(bit may_shut_down)
{
    byte j;                  /* the job this worker believes it holds */
    byte t;                  /* the token of that claim */
    byte beats;

idle:
    /* Forget the last claim: states that differ only in stale locals are one state. */
    j = 0; t = NONE; beats = 0;
    if
    :: atomic { claim(0, t); j = 0 }
    :: atomic { claim(1, t); j = 1 }
    :: all_final -> goto finished
    fi;

holding:
    /* The handler runs; any of these may come first, and the clock may run the lease
     * out in between (a stalled worker, a SIGSTOP, a cut network). */
    if
    :: beats < HEARTBEATS ->
        /* job_heartbeat_many: token matches and status = 'running'; only the lease moves.
         * It does not look at the lease: the fence is the token, not the clock. */
        atomic {
            if
            :: held(j, t) -> lease[j] = LEASE
            :: else -> skip
            fi;
            beats++
        }
        goto holding
    :: true ->
       atomic {
        /* job_complete_many */
        if
        :: held(j, t) ->
            assert(t == current_claim[j]);
            status[j] = DONE; token[j] = NONE; lease[j] = 0
        :: else -> skip      /* the statement returns False: the worker lost the job */
        fi
       }
    :: true ->
       atomic {
        /* job_fail_many: failed at the last attempt, else pending again */
        if
        :: held(j, t) ->
            assert(t == current_claim[j]);
            token[j] = NONE; lease[j] = 0;
            if
            :: attempts[j] >= MAX_ATTEMPTS -> status[j] = FAILED
            :: else -> status[j] = PENDING
            fi
        :: else -> skip
        fi
       }
    :: may_shut_down ->
        /* job_release_many, as the worker shuts down: the attempt is given back. */
        atomic {
            if
            :: held(j, t) ->
                assert(t == current_claim[j]);
                status[j] = PENDING; token[j] = NONE; lease[j] = 0; attempts[j]--
            :: else -> skip
            fi
        }
        goto finished
    :: true ->
        /* SIGKILL: the claim is forgotten; the supervisor starts a fresh process. */
        skip
    fi;
    goto idle;

finished:
    skip
}

/* The abstract clock: one tick runs every lease down by one. */
active proctype clock()
{
end:
    do
    :: atomic { lease[0] > 0 || lease[1] > 0 ->
           if :: lease[0] > 0 -> lease[0]-- :: else -> skip fi;
           if :: lease[1] > 0 -> lease[1]-- :: else -> skip fi }
    od
}

/* job_reap: status = 'running' AND lease_until < now(); the token is cleared, so the
 * stalled holder's late writes match no row. */
inline reap(j)
{
    status[j] == RUNNING && lease[j] == 0 ->
        token[j] = NONE;
        if
        :: attempts[j] >= MAX_ATTEMPTS -> status[j] = FAILED
        :: else -> status[j] = PENDING
        fi
}

active proctype reaper()
{
end:
    do
    :: atomic { reap(0) }
    :: atomic { reap(1) }
    od
}

init
{
    atomic {
        /* Every worker may be killed and restarted any number of times; one of them may
         * also shut down cleanly (release), so the fleet never runs out of workers. */
        run worker(0);
        run worker(0);
        run worker(1)
    }
}

ltl done_or_failed { <> all_final }
