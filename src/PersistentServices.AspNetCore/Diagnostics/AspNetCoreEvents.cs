using Microsoft.Extensions.Logging;

namespace PersistentServices.Diagnostics;

/// <summary>Log messages of the ASP.NET Core integration (event ids 1100–1299).</summary>
internal static partial class AspNetCoreEvents
{
    [LoggerMessage(1100, LogLevel.Debug, "Started session {SessionTag}")]
    public static partial void SessionStarted(ILogger logger, string sessionTag);

    [LoggerMessage(1101, LogLevel.Debug, "Ended session {SessionTag} ({Reason})")]
    public static partial void SessionEnded(ILogger logger, string sessionTag, string reason);

    [LoggerMessage(1102, LogLevel.Debug, "Refused request {Sequence} of session {SessionTag}: {Outcome}")]
    public static partial void RequestRefused(ILogger logger, long sequence, string sessionTag, string outcome);

    [LoggerMessage(1103, LogLevel.Error, "Persistent endpoint '{Endpoint}' threw while executing request {Sequence} of session {SessionTag}; the reply is 500")]
    public static partial void EndpointThrew(ILogger logger, string endpoint, long sequence, string sessionTag, Exception exception);

    [LoggerMessage(1104, LogLevel.Error, "Persistent request {Sequence} of session {SessionTag} gets 503: nothing was acknowledged, its client retries")]
    public static partial void LogUnavailable(ILogger logger, long sequence, string sessionTag, Exception? exception);

    [LoggerMessage(1105, LogLevel.Warning, "The service cannot make requests durable (recovering, stopping, or its log failed); persistent request {Sequence} gets 503")]
    public static partial void PersistentRequestUnavailable(ILogger logger, long sequence, Exception? exception);

    [LoggerMessage(1106, LogLevel.Warning, "The service cannot answer from durable state (recovering, stopping, or its log failed); a read-only request gets 503")]
    public static partial void ReadOnlyRequestUnavailable(ILogger logger, Exception? exception);

    [LoggerMessage(1107, LogLevel.Warning, "The service cannot make session starts or ends durable (recovering, stopping, or its log failed); the session request gets 503")]
    public static partial void SessionResourceUnavailable(ILogger logger, Exception? exception);

    [LoggerMessage(1108, LogLevel.Warning, "Refused a call claiming to come from service '{Caller}': it had {Reason}")]
    public static partial void PeerCallRefused(ILogger logger, string caller, string reason);

    [LoggerMessage(1109, LogLevel.Warning, "Refused a domain message to {Path}: it had {Reason}")]
    public static partial void DomainMessageRefused(ILogger logger, string path, string reason);

    [LoggerMessage(1110, LogLevel.Warning, "Refused a DV header from '{Caller}': it had {Reason}")]
    public static partial void DvRefused(ILogger logger, string caller, string reason);

    [LoggerMessage(1114, LogLevel.Information,
        "Request {Sequence} of session {SessionTag} has not finished within ReplyTimeout: its client gets 503 reply-pending, the execution goes on, and a retry gets the reply")]
    public static partial void ReplyPending(ILogger logger, long sequence, string sessionTag);

    [LoggerMessage(1122, LogLevel.Warning,
        "Session start {SessionTag} was not durable at the required replicas within ReplyTimeout ({TimeoutMs} ms): its client gets 503 reply-pending and no id; the start is ended in the log (nothing started)")]
    public static partial void SessionStartPending(ILogger logger, string sessionTag, long timeoutMs);

    [LoggerMessage(1123, LogLevel.Information,
        "A read-only request shows state not durable at the required replicas within ReplyTimeout ({TimeoutMs} ms): its client gets 503 reply-pending, a retry gets the answer")]
    public static partial void ReadOnlyReplyPending(ILogger logger, long timeoutMs);

    [LoggerMessage(1124, LogLevel.Debug, "Session start {SessionTag}, answered 503 reply-pending, and its end are durable at the required replicas now")]
    public static partial void SessionStartAbandoned(ILogger logger, string sessionTag);

    [LoggerMessage(1200, LogLevel.Information,
        "Analysis scan: {Sessions} live sessions ({AtRest} at rest read directly, and {VariablesAtRest} shared variables), {Requests} logged requests, {Records} records from LSN {ScannedFrom} in {ElapsedMs} ms ({StatesFromParts} checkpointed session states read from parts); accepting new sessions")]
    public static partial void AnalysisDone(ILogger logger, int sessions, int atRest, int variablesAtRest, long requests, long records, long scannedFrom, long elapsedMs, int statesFromParts);

    [LoggerMessage(1201, LogLevel.Information, "Replayed {Sessions} sessions ({Requests} requests) in {ElapsedMs} ms; recovery finished")]
    public static partial void ReplayDone(ILogger logger, int sessions, long requests, long elapsedMs);

    [LoggerMessage(1202, LogLevel.Critical, "Recovery failed; the service stops (fail-stop)")]
    public static partial void RecoveryFailed(ILogger logger, Exception exception);

    [LoggerMessage(1209, LogLevel.Information, "The host is stopping before recovery's first part ended: the start ends without failing, and the stop runs as usual (requests meanwhile get 503)")]
    public static partial void StoppedWhileRecovering(ILogger logger);

    [LoggerMessage(1212, LogLevel.Warning,
        "Crash point {Point} is armed (after {After} hits pass): this process kills itself (SIGKILL) when it reaches it. Only crash tests set PERSISTENTSERVICES_CRASH_POINT")]
    public static partial void CrashPointArmed(ILogger logger, string point, int after);

    [LoggerMessage(1203, LogLevel.Critical,
        "UsePersistentServices() was not called, so logged requests cannot be replayed; call app.UsePersistentServices() before mapping endpoints")]
    public static partial void PipelineMissing(ILogger logger);

    [LoggerMessage(1205, LogLevel.Error,
        "Replay of session {SessionTag} diverged at request {Sequence} (LSN {Lsn}); the session is quarantined (its requests get session-diverged), every other session recovers")]
    public static partial void SessionQuarantined(ILogger logger, string sessionTag, long sequence, long lsn, Exception exception);

    [LoggerMessage(1206, LogLevel.Warning,
        "Session {SessionTag} was an orphan: its records from LSN {OrphanLsn} on (in request {Sequence}) are skipped (end-of-skip logged) and it continues from there ({Positions} logged requests looked at)")]
    public static partial void OrphanRolledBack(ILogger logger, string sessionTag, long orphanLsn, long sequence, int positions);

    [LoggerMessage(1204, LogLevel.Warning, "Replayed request {Sequence} of session {SessionTag} (LSN {Lsn}) threw, as a 500 reply; its logged reply is compared")]
    public static partial void ReplayedEndpointThrew(ILogger logger, long sequence, string sessionTag, long lsn, Exception exception);

    [LoggerMessage(1207, LogLevel.Warning,
        "Replay of session {SessionTag} ran request {Sequence} (LSN {Lsn}) past its log and had to abandon it; it stays unanswered (retries get 503) until the session's rollback runs it again")]
    public static partial void ReplayTailAbandoned(ILogger logger, string sessionTag, long sequence, long lsn, Exception exception);

    [LoggerMessage(1208, LogLevel.Error,
        "The checkpoint after a promotion's analysis scan (taken once the service serves) failed; the anchor still names the previous one, and the next periodic checkpoint moves it")]
    public static partial void CheckpointAfterPromotionFailed(ILogger logger, Exception exception);

    // The domain's messages, one event each at Debug (off by default; the domain kill test turns them on): what a call
    // carried and what its reply said, on both sides, so an orphan decision can be followed across members' logs.
    [LoggerMessage(1125, LogLevel.Debug,
        "Domain call from '{Caller}' for session {SessionTag} number {Sequence}: {Outcome} (the session expects {Expected}); the call's DV {MessageDv}; the session's DV {SessionDv}")]
    public static partial void DomainCallAdmitted(ILogger logger, string caller, string sessionTag, long sequence, string outcome, long expected, string messageDv, string sessionDv);

    [LoggerMessage(1126, LogLevel.Debug, "Domain reply to '{Caller}' for session {SessionTag} number {Sequence}: {Status}, its DV {ReplyDv}")]
    public static partial void DomainReplySent(ILogger logger, string caller, string sessionTag, long sequence, int status, string replyDv);

    [LoggerMessage(1127, LogLevel.Debug, "Domain call {Number} to '{Callee}' from session {SessionTag}: sent with DV {Dv}")]
    public static partial void DomainCallSent(ILogger logger, long number, string callee, string sessionTag, string dv);

    [LoggerMessage(1111, LogLevel.Debug, "Domain call {Number} to '{Callee}' from session {SessionTag}: {Status}, reply DV {ReplyDv}, logged at LSN {Lsn}; the session's DV now {SessionDv}")]
    public static partial void DomainCallReplied(ILogger logger, long number, string callee, string sessionTag, int status, string replyDv, long lsn, string sessionDv);

    [LoggerMessage(1389, LogLevel.Debug, "Session {SessionTag}'s replay found request {Sequence}'s {Kind} record at LSN {Lsn} an orphan: its DV {Dv}")]
    public static partial void OrphanRecordFound(ILogger logger, string sessionTag, long sequence, string kind, long lsn, string dv);

    [LoggerMessage(1463, LogLevel.Warning,
        "Replication: this primary of term {Term} was fenced; it demotes itself and rejoins its group as a replica ({Executing} persistent requests still running end first; none of them is acknowledged)")]
    public static partial void Demoting(ILogger logger, long term, int executing);

    [LoggerMessage(1464, LogLevel.Information,
        "Replication: the fenced primary of term {OldTerm} is a replica of term {Term} now, without a restart ({ElapsedMs} ms); its hot follower replays its copy")]
    public static partial void Demoted(ILogger logger, long oldTerm, long term, long elapsedMs);

    [LoggerMessage(1465, LogLevel.Error,
        "Replication: the fenced primary of term {Term} could not demote itself; it answers 503 replica and its liveness fails until a restart makes it a replica")]
    public static partial void DemotionFailed(ILogger logger, long term, Exception exception);

    [LoggerMessage(1466, LogLevel.Information, "Replication: the replay of recovered sessions ended because this primary was fenced ({Reason}); it demotes itself")]
    public static partial void ReplayEndedByFence(ILogger logger, string reason);
}
