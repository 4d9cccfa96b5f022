/*
 * The request/response/acknowledge protocol between the exactly-once client and a persistent service
 * ([Phoenix/App Fig. 2], [MSP §3.1]): one session, N requests, lossy channels both ways, crashes of the service
 * (before or after its force) and of the client (anywhere, including between marking a reply as handed over and the
 * application using it), at most MAXFAULTS faults in all (eventual fault freedom). model/README.md maps each step to
 * the code. Checked by model/check.sh:
 *   safety 1  every request executes at most once                    effects[i] <= 1
 *   safety 2  a reply handed over is the reply of that one execution handed_val[i] == exec_of[i]
 *   safety 3  a reply reaches the application at most once          handed[i] <= 1
 *   liveness  once faults stop, every request executes and the client finishes   <> done
 */
#ifndef N
#define N 3
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 3
#endif

byte faults;

/* The service's durable log: a reply leaves only after its request, effect and reply are forced, so what any client
 * saw is durable; a crash before the force loses the request and its effect (recovery replays the durable log only). */
byte s_last;            /* the session's last executed number (next expected = s_last + 1) */
byte s_reply;           /* its buffered reply; the next number replaces it (the client's acknowledgement) */
byte effects[N + 1];    /* durable executions per number */
byte exec_of[N + 1];    /* the execution id of number i (replies carry it) */
byte next_exec = 1;

/* The client's store (durable) and the application. */
bool stored[N + 1];     /* Request record forced (t0-t1) */
bool replied[N + 1];    /* Reply record forced (t6) */
byte reply_of[N + 1];
bool delivered[N + 1];  /* Delivered record forced (t8'), before the application has the reply */
byte handed[N + 1];     /* replies the application received */
byte handed_val[N + 1];
bool done;

chan req = [2] of { byte };        /* PS-Seq (the session is implicit) */
chan rep = [2] of { byte, byte };  /* PS-Seq, the reply (its execution id) */

active proctype Service()
{
    byte s;
end:
    do
    :: req ? s ->
        if
        :: s == s_last + 1 ->
            if
            :: faults < MAXFAULTS -> faults++   /* crash before the force: nothing of the request is durable */
            :: atomic { effects[s]++; exec_of[s] = next_exec; next_exec++; s_last = s; s_reply = exec_of[s] };
               if
               :: nfull(rep) -> rep ! s, s_reply
               :: faults < MAXFAULTS -> faults++   /* reply lost, or a crash after the force */
               :: full(rep) -> skip
               fi
            fi
        :: s == s_last && s > 0 ->              /* a retry of the last request: the buffered reply, nothing executes */
#ifdef MUTANT_REEXECUTE
            effects[s]++;                       /* mutant: a retry executes again (a key kept beside the state, not in its log) */
#endif
            if
            :: nfull(rep) -> rep ! s, s_reply
            :: faults < MAXFAULTS -> faults++
            :: full(rep) -> skip
            fi
        :: else -> skip                         /* stale or gap: refused, nothing executes (never sent by this client) */
        fi
    :: faults < MAXFAULTS && nempty(req) -> req ? _; faults++   /* a request lost on the way */
    od
}

active proctype Client()
{
    byte cur = 1;   /* volatile: the number being worked on; 0 after a crash */
    byte s, r;
    do
    :: cur > N -> done = true; break
    :: cur >= 1 && cur <= N && !stored[cur] ->
        stored[cur] = true;                     /* t0-t1: stored and forced before the first send */
        if :: nfull(req) -> req ! cur :: else -> skip fi
    :: rep ? s, r ->
        if
        :: cur >= 1 && cur <= N && s == cur && !replied[cur] -> replied[cur] = true; reply_of[cur] = r   /* t6 */
        :: else -> skip                         /* a duplicate of a reply already stored */
        fi
    :: cur >= 1 && cur <= N && replied[cur] && !delivered[cur] ->
#ifdef MUTANT_HANDOVER_FIRST
        handed[cur]++;                          /* mutant: handed over before the mark */
        if :: faults < MAXFAULTS -> faults++; cur = 0 :: true -> skip fi;
        if :: cur == 0 -> skip :: else -> delivered[cur] = true; cur++ fi
#else
        delivered[cur] = true;                  /* t8': marked before the application has it */
        if
        :: faults < MAXFAULTS -> faults++; cur = 0   /* crash in the handover window: lost to the application */
        :: true ->
            assert(handed_val[cur] == 0);
            handed[cur]++; handed_val[cur] = reply_of[cur];
            assert(handed_val[cur] == exec_of[cur]);   /* safety 2 */
            cur++                                /* the next request acknowledges this reply (t7) */
        fi
#endif
#ifndef MUTANT_NO_RETRY
    :: timeout && cur >= 1 && cur <= N && stored[cur] && !replied[cur] && nfull(req) ->
        req ! cur                               /* retry with the same number */
#endif
    :: faults < MAXFAULTS && cur != 0 -> faults++; cur = 0   /* client crash: only the store survives */
    :: cur == 0 ->                              /* RecoverAsync: the first entry not handed over */
        cur = 1;
        do
        :: cur <= N && stored[cur] && delivered[cur] -> cur++
        :: else -> break
        od;
        if
        :: cur <= N && stored[cur] && !replied[cur] && nfull(req) -> req ! cur   /* resend the pending request */
        :: else -> skip
        fi
    od
}

#define SAFE(i) (effects[i] <= 1 && handed[i] <= 1)
ltl safety { [] (SAFE(1) && SAFE(2) && SAFE(3)) }
ltl liveness { <> (done && effects[1] == 1 && effects[2] == 1 && effects[3] == 1) }
