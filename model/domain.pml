/*
 * The service-domain protocol ([MSP §3.1, §4.1-4.2]; docs/domains.md): locally optimistic logging with dependency
 * vectors (DVs), recovered state numbers, orphan rollback of sessions and shared variables, the distributed flush before
 * a reply leaves the domain, and a caller's call numbering. model/README.md maps each step to the code.
 *
 * Two members: A serves one end-client session (requests 1..N, the client resending the first unanswered one) and makes
 * one call to B per request; B runs the calls in A's derived session D and credits them to a shared variable V (read,
 * then written: it carries its last writer's DV to the next reader). Crashes of A and B (at most MAXCRASH) lose the
 * unforced tail of the current epoch and start a new one; a call or its answer may be lost and a DV header refused
 * (at most MAXLOSS of those). Recovered state numbers reach the other member late (any time after the restart).
 *
 * Checked by model/check.sh:
 *   safety      no acknowledged end-client reply depends on lost state: once request r is acknowledged, its
 *               execution at A and the execution at B of the call it logged stay in the surviving history; nothing
 *               executes twice per request number at A or call number at B in the surviving history
 *   liveness    once faults stop, the client gets every reply, or a session is quarantined (after more than MAXRB
 *               rollbacks or abandoned runs without progress)
 *   converges   (correct model only) the client gets every reply: nothing is ever quarantined
 * Mutants (-D), one per defect of issue 49, each expected to fail a claim:
 *   MUTANT_LOST_EPOCH_REPLY       1: B answers A's new incarnation with the buffered reply computed for A's lost epoch,
 *                                    and A drops its own earlier epochs from DVs (DependencyVector.WithOwn) before
 *                                    the reply's DV is checked (as when A does not hold its own recovered number)
 *   MUTANT_REFUSAL_AS_OUTCOME     2: a refused DV header (401) is logged as the call's reply and consumes its number
 *   MUTANT_CALLER_KEEPS_NUMBERING 3: the callee's session rewinds, the caller's session keeps its call counter; the
 *                                    callee's 409 (gap) / 410 (stale) is logged as the call's reply
 *   MUTANT_NO_VAR_ROLLBACK        4: the shared variable that carries a lost dependency is not rolled back
 *   MUTANT_UNCAPPED               4: ... and a refused re-run ("rolls back again") is not counted towards the cap
 *   MUTANT_NO_FLUSH               (control) a reply leaves the domain after a local force only
 *   MUTANT_RESET_DV_REPLY         5: B answers a retry of its last call, when it knows that call depends on lost state
 *                                    (its rollback is due), with the DV of the session's recovery point instead of the
 *                                    call's own (the code read the session's DV after the rollback had reset it)
 * Variants of the code as it is (not mutants; check.sh records what they do):
 *   CODE_WITHOWN    own earlier epochs dropped from a DV when a record is logged, after the reply's header was checked
 *                   (RequestExecution.Advance -> DependencyVector.WithOwn): every claim still holds
 *   CODE_NO_HOLD    B answers a later incarnation of A at once (its buffered reply, or a fresh execution): safe, but
 *                   A discards the orphan reply and runs again until B learns, and the session is quarantined
 *                   (converges fails) once those runs count towards the cap
 */
#define N 2                 /* end-client requests (fixed: the claims below spell out 1..N and the calls 1..K) */
#ifndef MAXLOSS
#define MAXLOSS 1           /* calls or answers lost, DV headers refused */
#endif
#ifndef MAXRB
#define MAXRB 2             /* OrphanRecovery.MaxRollbacksPerLoss, small */
#endif
#define MAXCRASH 2          /* crashes of A and B together; fixed: the DV macros below spell out NM * E = 6 slots */
#define E 3                 /* epochs per member: 1 + MAXCRASH */
#define NM 2
#define DVN 6               /* NM * E */
#define A 0
#define B 1
#define K (N + 1)           /* call numbers (a mutant may skip one) */
#define IX(m, e) ((m) * E + (e) - 1)   /* the DV slot of (member, epoch) */

/* A DV: per (member, epoch) the latest LSN depended on, 0 for none ([MSP §3.1], kept per epoch as the code does). */
typedef DV { byte d[DVN] };

/* kn[x].d[IX(m, e)]: what member x knows of m's epoch e: its recovered LSN + 1, 0 when not known. Logged and forced
 * when learned, so it survives x's crashes. A member always knows its own (LogOpener). */
DV kn[NM];

byte epoch[NM];             /* current epoch (failure-free period) */
byte tail[NM];              /* next LSN of the current epoch */
byte dur[NM];               /* LSNs below dur[m] of the current epoch are durable */
byte crashes, losses;

/* A: the end client's session S. */
byte aph;                   /* 0 idle, 1 admitted (call to issue), 2 call outstanding, 3 reply logged (flush to do) */
byte acur;                  /* the request being worked on (the last admitted) */
byte acc;                   /* S's call counter for B (volatile; rebuilt from the log) */
byte aRqE[N + 1], aRqL[N + 1];   /* request record of r: (epoch, LSN), 0 when not in the surviving history */
byte aCrE[N + 1], aCrL[N + 1];   /* call-reply record of r */
byte aCk[N + 1];            /* the call number r's call-reply record consumed */
bool aCok[N + 1];           /* that record holds a reply B computed (not a refusal logged as the outcome) */
DV adv1[N + 1], adv2[N + 1];/* S's DV after r's request record / after its call-reply record */
DV adv;                     /* S's DV */
byte acount[N + 1];         /* executions of request r in A's surviving history */
bool acked[N + 1];          /* the end client received r's reply */
byte arb;                   /* S's rollbacks and abandoned runs since its last reply */
bool aquar;                 /* S quarantined */

/* B: A's derived session D and the shared variable V. */
byte lastB;                 /* D's last call number (the next expected is lastB + 1) */
byte bRecE[K + 1], bRecL[K + 1]; /* the record of call k's execution (request, V's read and write, reply) */
DV bdv[K + 1];              /* D's DV after call k = the reply's DV = the DV V's write carries; bdv[0] empty */
byte bcount[K + 1];         /* executions of call k in B's surviving history */
byte vk;                    /* V holds the write of call vk (0: its initial value) */
byte vE, vL;                /* that write's record */
DV vdv;                     /* V's DV: its last writer's */
byte brb;                   /* D's rollbacks and refused re-runs since its last executed call */
bool bquar;                 /* D quarantined */

/* The call in flight A -> B and the answer B -> A (one of each: S is sequential). */
bool callIn;
byte callK;
DV callDv;
byte repKind;               /* 0 none, 1 reply, 2 409 orphan-message, 3 503, 4 401 DV refused, 5 409 gap, 6 410 stale, 7 diverged */
byte repK;
DV repDv;
byte repLostI, repLostV;    /* 409 orphan-message: the recovered state number (slot, LSN + 1) in PS-Orphan */

byte i, j, k;               /* scratch, 0 between steps */
bool found;

/* dv depends on state that member x knows was lost */
#define ORPH(dv, x, s) (dv.d[s] != 0 && kn[x].d[s] != 0 && dv.d[s] >= kn[x].d[s])
#define ORPHAN(dv, x) (ORPH(dv, x, 0) || ORPH(dv, x, 1) || ORPH(dv, x, 2) || ORPH(dv, x, 3) || ORPH(dv, x, 4) || ORPH(dv, x, 5))
/* x has not yet learned a recovered state number that the other member has */
#define PEND(x, y, s) (kn[x].d[s] == 0 && kn[y].d[s] != 0)
#define PENDING(x, y) (PEND(x, y, 0) || PEND(x, y, 1) || PEND(x, y, 2) || PEND(x, y, 3) || PEND(x, y, 4) || PEND(x, y, 5))
/* The domain's background work (learning, orphan rollbacks) is done: a paused retry may go again. */
#define QUIET (!PENDING(A, B) && !PENDING(B, A) && !(ORPHAN(adv, A) && !aquar) && !(ORPHAN(bdv[lastB], B) && !bquar))

inline clear(dst) { i = 0; do :: i < DVN -> dst.d[i] = 0; i++ :: else -> break od; i = 0 }
inline copy(dst, src) { i = 0; do :: i < DVN -> dst.d[i] = src.d[i]; i++ :: else -> break od; i = 0 }
inline merge(dst, src) {
    i = 0;
    do :: i < DVN -> if :: src.d[i] > dst.d[i] -> dst.d[i] = src.d[i] :: else fi; i++ :: else -> break od;
    i = 0
}
/* A record of member m at LSN l: its own entry moves there (Advance). The mutant drops m's own earlier epochs. */
inline own(dst, m, l) {
    dst.d[IX(m, epoch[m])] = l;
#if defined(MUTANT_LOST_EPOCH_REPLY) || defined(CODE_WITHOWN)
    i = 1; do :: i < epoch[m] -> dst.d[IX(m, i)] = 0; i++ :: else -> break od; i = 0
#endif
}
/* The call number S's log holds last (replay rebuilds CallCounters from the CallReply records). */
inline loggedCounter() {
    acc = 0; j = 1;
    do :: j <= N -> if :: aCrE[j] != 0 -> acc = aCk[j] :: else fi; j++ :: else -> break od; j = 0
}
/* S's request is abandoned or S rolled back: count it, quarantine beyond the cap. */
inline countA() { arb++; if :: arb > MAXRB -> aquar = true :: else fi }
inline countB() { brb++; if :: brb > MAXRB -> bquar = true :: else fi }
/* The call's numbering after S's rollback or abandoned run: from the log. The mutant keeps the volatile counter. */
inline renumber() {
#ifndef MUTANT_CALLER_KEEPS_NUMBERING
    loggedCounter()
#else
    skip
#endif
}
/* An answer that is not B's reply logged as the call's outcome (mutants 2 and 3). */
inline logRefusalAsOutcome() {
    aCrE[acur] = epoch[A]; aCrL[acur] = tail[A]; own(adv, A, tail[A]); tail[A]++;
    aCk[acur] = callK; aCok[acur] = false; copy(adv2[acur], adv); aph = 3
}

active proctype Domain()
{
    epoch[A] = 1; epoch[B] = 1; tail[A] = 1; tail[B] = 1; dur[A] = 1; dur[B] = 1;
end:
    do
    /* ---------------- A ---------------- */
    :: d_step { aph == 0 && !aquar && acur < N ->       /* the client's next request: logged (not forced), executed */
        acur++; acount[acur]++;
        aRqE[acur] = epoch[A]; aRqL[acur] = tail[A]; own(adv, A, tail[A]); tail[A]++;
        copy(adv1[acur], adv); aph = 1 }
    :: d_step { aph == 1 && !aquar && !callIn && repKind == 0 ->   /* the call to B: numbered at issue, carries S's DV, no force */
        acc++; callK = acc; copy(callDv, adv); callIn = true; aph = 2 }
    :: d_step { aph == 2 && !aquar && !bquar && !callIn && repKind == 0 && QUIET ->   /* retried, same number, after a pause */
        copy(callDv, adv); callIn = true }
    :: atomic { repKind != 0 ->                          /* B's answer reaches A */
        if
        :: aph != 2 || repK != callK -> skip             /* not for the call outstanding: dropped */
        :: else ->
            if
            :: repKind == 1 ->
#ifdef MUTANT_LOST_EPOCH_REPLY
                i = 1; do :: i < epoch[A] -> repDv.d[IX(A, i)] = 0; i++ :: else -> break od; i = 0;
#endif
                if
                :: ORPHAN(repDv, A) -> renumber(); aph = 1; countA()   /* an orphan reply: discarded, the request runs again */
                :: else ->                               /* merged into S's DV, logged with the reply (not forced) */
                    merge(adv, repDv);
                    aCrE[acur] = epoch[A]; aCrL[acur] = tail[A]; own(adv, A, tail[A]); tail[A]++;
                    aCk[acur] = repK; aCok[acur] = true; copy(adv2[acur], adv); aph = 3
                fi
            :: repKind == 2 ->                           /* 409 orphan-message: learn the number, abandon the request */
                if :: kn[A].d[repLostI] == 0 -> kn[A].d[repLostI] = repLostV :: else fi;
                renumber(); aph = 1; countA()
            :: repKind == 3 || repKind == 7 -> skip      /* 503 (or diverged): the call is retried */
            :: repKind == 4 ->                           /* 401: the DV header refused */
#ifdef MUTANT_REFUSAL_AS_OUTCOME
                logRefusalAsOutcome()
#else
                skip                                     /* not a reply: retried under the same number */
#endif
            :: repKind == 5 || repKind == 6 ->           /* 409 sequence-gap / 410 stale */
#ifdef MUTANT_CALLER_KEEPS_NUMBERING
                logRefusalAsOutcome()
#else
                renumber(); aph = 1; countA()            /* not a reply: the request runs again, numbered from the log */
#endif
            fi
        fi;
        repKind = 0; repK = 0; clear(repDv); repLostI = 0; repLostV = 0 }
    :: atomic { aph == 3 && !aquar && !ORPHAN(adv, A) ->   /* the distributed flush, then the reply leaves the domain */
        found = false;                                   /* a member answers 409: that state was lost */
#ifndef MUTANT_NO_FLUSH
        k = 1;
        do
        :: k < epoch[B] ->
            if
            :: adv.d[IX(B, k)] != 0 && adv.d[IX(B, k)] >= kn[B].d[IX(B, k)] ->
                found = true; kn[A].d[IX(B, k)] = kn[B].d[IX(B, k)]
            :: else
            fi; k++
        :: else -> break
        od; k = 0;
#endif
        if
        :: found -> skip                                 /* S is an orphan now: the rollback below */
        :: else ->
#ifndef MUTANT_NO_FLUSH
            if :: adv.d[IX(B, epoch[B])] != 0 -> dur[B] = tail[B] :: else fi;   /* B forces up to its entry */
#endif
            dur[A] = tail[A];                            /* A's own force */
            acked[acur] = true; aph = 0; arb = 0
        fi;
        found = false }
    :: d_step { ORPHAN(adv, A) && !aquar ->              /* S depends on known lost state: roll back to the first orphan record */
        j = 1;
        do
        :: j <= acur && !(aCrE[j] != 0 && ORPHAN(adv2[j], A)) -> j++
        :: else -> break
        od;
        assert(j <= acur);
        /* cut at j's call-reply record: later records are void (end-of-skip); request j runs again from its call */
        aCrE[j] = 0; aCrL[j] = 0; aCk[j] = 0; aCok[j] = false; clear(adv2[j]);
        k = j + 1;
        do
        :: k <= N ->
            if :: aRqE[k] != 0 -> acount[k]-- :: else fi;
            aRqE[k] = 0; aRqL[k] = 0; aCrE[k] = 0; aCrL[k] = 0; aCk[k] = 0; aCok[k] = false; clear(adv1[k]); clear(adv2[k]); k++
        :: else -> break
        od;
        acur = j; copy(adv, adv1[j]); aph = 1; renumber(); countA();
        j = 0; k = 0 }
    :: d_step { crashes < MAXCRASH ->                    /* A crashes: the unforced tail is lost; restart in a new epoch */
        kn[A].d[IX(A, epoch[A])] = dur[A];               /* its recovered state number: LSN dur - 1 */
        k = 1;
        do
        :: k <= N ->
            if
            :: aRqE[k] == epoch[A] && aRqL[k] >= dur[A] ->
                acount[k]--; aRqE[k] = 0; aRqL[k] = 0; clear(adv1[k]);
                aCrE[k] = 0; aCrL[k] = 0; aCk[k] = 0; aCok[k] = false; clear(adv2[k])
            :: !(aRqE[k] == epoch[A] && aRqL[k] >= dur[A]) && aCrE[k] == epoch[A] && aCrL[k] >= dur[A] ->
                aCrE[k] = 0; aCrL[k] = 0; aCk[k] = 0; aCok[k] = false; clear(adv2[k])
            :: else
            fi; k++
        :: else -> break
        od;
        epoch[A]++; tail[A] = 1; dur[A] = 1; crashes++;
        /* replay: S from the surviving log; the request the crash cut short runs live */
        acur = 0; k = 1;
        do :: k <= N -> if :: aRqE[k] != 0 -> acur = k :: else fi; k++ :: else -> break od; k = 0;
        if
        :: acur == 0 -> clear(adv); aph = 0
        :: acur > 0 && aCrE[acur] != 0 -> copy(adv, adv2[acur]); if :: acked[acur] -> aph = 0 :: else -> aph = 3 fi
        :: else -> copy(adv, adv1[acur]); aph = 1
        fi;
        loggedCounter(); arb = 0;
        repKind = 0; repK = 0; clear(repDv); repLostI = 0; repLostV = 0 }   /* an answer to the dead process is lost */
    /* ---------------- B ---------------- */
    :: atomic { callIn && repKind == 0 ->               /* A's call reaches B */
        callIn = false;
        if
        :: losses < MAXLOSS -> losses++                  /* lost (or its answer lost): A retries */
        :: losses < MAXLOSS -> losses++; repKind = 4; repK = callK   /* the DV header refused (401) */
        :: true ->
            repK = callK;
            /* a later incarnation of A, while D depends on an earlier epoch of A whose end B does not know yet */
            found = false;
#if !defined(MUTANT_LOST_EPOCH_REPLY) && !defined(CODE_NO_HOLD)
            j = E;                                       /* the caller's epoch: its newest entry in the call's DV */
            do :: j > 1 && callDv.d[IX(A, j)] == 0 -> j-- :: else -> break od;
            k = 1;
            do
            :: k < j ->
                if
                :: bdv[lastB].d[IX(A, k)] != 0 && kn[B].d[IX(A, k)] == 0 -> found = true
                :: else
                fi; k++
            :: else -> break
            od; j = 0; k = 0;
#endif
            if
            :: bquar -> repKind = 7                      /* 409 session-diverged */
            :: !bquar && ORPHAN(callDv, B) ->            /* 409 orphan-message with the recovered state number */
                k = 0;
                do :: k < DVN && !ORPH(callDv, B, k) -> k++ :: else -> break od;
                repKind = 2; repLostI = k; repLostV = kn[B].d[k]; k = 0
            :: else -> if
                :: found -> repKind = 3                  /* waits to learn where that epoch ended: 503 */
                :: else -> if
                    :: callK == lastB && lastB > 0 ->    /* a retry: the buffered reply, unless B knows it is an orphan */
                        if
#ifdef MUTANT_RESET_DV_REPLY
                        :: ORPHAN(bdv[lastB], B) -> repKind = 1; clear(repDv)   /* the recovery point's DV (no checkpoints: empty) */
#else
                        :: ORPHAN(bdv[lastB], B) -> repKind = 3
#endif
                        :: else -> repKind = 1; copy(repDv, bdv[lastB])
                        fi
                    :: callK == lastB + 1 && callK <= K ->
                        if
                        :: ORPHAN(vdv, B) ->             /* V depends on known lost state: refused; D rolls back again */
                            repKind = 3;
#ifndef MUTANT_UNCAPPED
                            countB()
#endif
                        :: else ->                       /* executed: V read and written, logged (not forced) */
                            k = callK; bcount[k]++;
                            copy(bdv[k], bdv[lastB]); merge(bdv[k], vdv); merge(bdv[k], callDv);
                            bRecE[k] = epoch[B]; bRecL[k] = tail[B]; own(bdv[k], B, tail[B]); tail[B]++;
                            vk = k; vE = bRecE[k]; vL = bRecL[k]; copy(vdv, bdv[k]);
                            lastB = k; brb = 0;
                            repKind = 1; copy(repDv, bdv[k]); k = 0
                        fi
                    :: callK > lastB + 1 && callK <= K -> repKind = 5   /* 409 sequence-gap */
                    :: callK < lastB || callK > K -> repKind = 6   /* 410 stale */
                    fi
                fi
            fi;
            found = false
        fi }
    :: d_step { ORPHAN(bdv[lastB], B) && !bquar ->       /* D depends on known lost state: roll back to the first orphan record */
        j = 1;
        do :: j <= lastB && !(bRecE[j] != 0 && ORPHAN(bdv[j], B)) -> j++ :: else -> break od;
        k = j;
        do
        :: k <= lastB -> bcount[k]--; bRecE[k] = 0; bRecL[k] = 0; clear(bdv[k]); k++
        :: else -> break
        od;
        lastB = j - 1;
#ifndef MUTANT_NO_VAR_ROLLBACK
        vk = lastB; vE = bRecE[lastB]; vL = bRecL[lastB]; copy(vdv, bdv[lastB]);   /* V back along its chain */
#endif
        countB(); j = 0; k = 0 }
    :: d_step { crashes < MAXCRASH ->                    /* B crashes */
        kn[B].d[IX(B, epoch[B])] = dur[B];
        k = 1;
        do
        :: k <= K ->
            if
            :: bRecE[k] == epoch[B] && bRecL[k] >= dur[B] -> bcount[k]--; bRecE[k] = 0; bRecL[k] = 0; clear(bdv[k])
            :: else
            fi; k++
        :: else -> break
        od;
        k = lastB;
        do :: k > 0 && bRecE[k] == 0 -> k-- :: else -> break od;
        lastB = k;
        /* V from the log: its latest logged write (the mutant's V may still hold a write D's rollback voided) */
        if
        :: vk > 0 && vE == epoch[B] && vL >= dur[B] -> vk = lastB; vE = bRecE[lastB]; vL = bRecL[lastB]; copy(vdv, bdv[lastB])
        :: else
        fi;
        epoch[B]++; tail[B] = 1; dur[B] = 1; crashes++; brb = 0; k = 0;
        callIn = false }                                 /* a call to the dead process fails: A retries */
    /* ---------------- the domain ---------------- */
    :: d_step { PENDING(B, A) -> merge(kn[B], kn[A]) }  /* A's recovered state numbers reach B (broadcast or pull) */
    :: d_step { PENDING(A, B) -> merge(kn[A], kn[B]) }
    :: d_step { dur[A] < tail[A] -> dur[A] = tail[A] }  /* a background force (group commit, checkpoint) */
    :: d_step { dur[B] < tail[B] -> dur[B] = tail[B] }
    od
}

#define ACKED_OK(r) (!acked[r] || (acount[r] == 1 && aCok[r] && aCk[r] > 0 && aCk[r] <= K && bcount[aCk[r]] == 1))
#define ONCE (acount[1] <= 1 && acount[2] <= 1 && bcount[1] <= 1 && bcount[2] <= 1 && bcount[3] <= 1)
ltl safety { [] (ACKED_OK(1) && ACKED_OK(2) && ONCE) }
ltl liveness { <> (acked[N] || aquar || bquar) }
ltl converges { <> acked[N] }
