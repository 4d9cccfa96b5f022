using System.Diagnostics.Metrics;

namespace PersistentServices.Diagnostics;

/// <summary>
/// The library's one meter, <c>PersistentServices</c>, and its instruments, one set per service: created from the host's
/// <see cref="IMeterFactory"/> (a singleton registered by <c>AddPersistentServices</c>, as ASP.NET Core's rate-limiting
/// metrics are), so two services in one process (two test hosts) report apart and a test reads its own service's
/// measurements (<c>MetricCollector&lt;T&gt;</c> over the app's factory). Instruments are named
/// <c>persistentservices.&lt;area&gt;.&lt;thing&gt;</c>; durations are in seconds. Engine code without a host (psctl, the
/// client's store, unit tests) opens its log without metrics and records nothing.
/// </summary>
internal sealed class PersistentServicesMetrics
{
    public const string MeterName = PersistentServicesTelemetry.MeterName;

    /// <summary>
    /// Bucket boundaries for the durations of one commit, force or read (seconds, 100 µs to 10 s): exporters' defaults
    /// (0, 5, 10, ... 10,000) are meant for milliseconds and would put every commit into the first bucket.
    /// </summary>
    public static readonly InstrumentAdvice<double> ShortDurations = new()
    {
        HistogramBucketBoundaries = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    };

    /// <summary>Bucket boundaries for a recovery's replay (seconds, 10 ms to 10 min).</summary>
    public static readonly InstrumentAdvice<double> LongDurations = new()
    {
        HistogramBucketBoundaries = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
    };

    public PersistentServicesMetrics(IMeterFactory meterFactory)
    {
        ArgumentNullException.ThrowIfNull(meterFactory);
        Meter = meterFactory.Create(new MeterOptions(MeterName) { Version = typeof(PersistentServicesMetrics).Assembly.GetName().Version?.ToString() });
        LogAppends = Meter.CreateCounter<long>(
            "persistentservices.log.appends", "{record}", "Records appended to the log.");
        LogAppendedBytes = Meter.CreateCounter<long>(
            "persistentservices.log.appended_bytes", "By", "Record bytes appended to the log (envelope included).");
        LogCommits = Meter.CreateCounter<long>(
            "persistentservices.log.commits", "{commit}", "Durable commits (log forces).");
        LogCommitDuration = Meter.CreateHistogram(
            "persistentservices.log.commit.duration", "s", "Time from issuing a commit to it being durable.", tags: null, advice: ShortDurations);
        RecoveryReplayDuration = Meter.CreateHistogram(
            "persistentservices.recovery.replay.duration", "s", "Time to replay every recovered session after a crash.", tags: null, advice: LongDurations);
        Requests = Meter.CreateCounter<long>(
            "persistentservices.requests", "{request}", "Persistent requests by outcome (executed, duplicate, refused).");
        Forces = Meter.CreateCounter<long>(
            "persistentservices.log.forces", "{force}", "Times a request waited for the log to be durable, by reason (reply, call, every-message); commits are shared, see log.commits.");
        Calls = Meter.CreateCounter<long>(
            "persistentservices.calls", "{call}", "Calls persistent requests made to other services, by callee role and how they were answered (sent, from-log).");
        CallNodeChanges = Meter.CreateCounter<long>(
            "persistentservices.calls.replication.node_changes", "{change}",
            "Times a replication group's serving node changed for this service's calls (PersistentCallOptions.ReplicationGroups): an attempt was served by another node of the group than the one that served before (tag node: the one that serves now).");
        DomainMessages = Meter.CreateCounter<long>(
            "persistentservices.domain.messages", "{message}", "Domain messages sent to members, by kind (flush, recovered).");
        Orphans = Meter.CreateCounter<long>(
            "persistentservices.domain.orphans", "{session}", "Sessions found to be orphans and rolled back, and replies held back because they were.");
        SessionCheckpoints = Meter.CreateCounter<long>(
            "persistentservices.checkpoints.sessions", "{checkpoint}", "Session checkpoints taken.");
        SessionCheckpointParts = Meter.CreateCounter<long>(
            "persistentservices.checkpoints.session_parts", "{record}", "Records holding parts of session checkpoints whose state did not fit one record.");
        ServiceCheckpoints = Meter.CreateCounter<long>(
            "persistentservices.checkpoints.service", "{checkpoint}", "Service (fuzzy) checkpoints taken; each may truncate the log.");
        DivergedSessions = Meter.CreateCounter<long>(
            "persistentservices.recovery.diverged_sessions", "{session}", "Sessions whose replay diverged and that were quarantined.");
        RepliesLoggedInFull = Meter.CreateCounter<long>(
            "persistentservices.replies.logged_in_full", "{reply}",
            "Replies kept in the log instead of memory, by reason: size (above MaxBufferedReplyBytes) or budget (the session memory budget was full).");
        ReplyReadDuration = Meter.CreateHistogram(
            "persistentservices.replies.read.duration", "s", "Time to read a reply kept in the log back for a duplicate.", tags: null, advice: ShortDurations);
        SessionsRefused = Meter.CreateCounter<long>(
            "persistentservices.sessions.refused", "{session}", "Session starts refused with 429, by reason: max_sessions or max_sessions_per_owner.");
        SessionsExpired = Meter.CreateCounter<long>(
            "persistentservices.sessions.expired", "{session}", "Sessions ended by expiry, by kind: never_used (UnusedSessionRetention) or idle (SessionIdleRetention).");
        LogCommitBatch = Meter.CreateHistogram<long>(
            "persistentservices.log.commit.waiters", "{waiter}", "Waiters released by one commit (group commit).");
    }

    /// <summary>The service's meter (owned by the factory, which disposes it with the host).</summary>
    public Meter Meter { get; }

    public Counter<long> LogAppends { get; }

    public Counter<long> LogAppendedBytes { get; }

    public Counter<long> LogCommits { get; }

    public Histogram<double> LogCommitDuration { get; }

    public Histogram<double> RecoveryReplayDuration { get; }

    public Counter<long> Requests { get; }

    public Counter<long> Forces { get; }

    public Counter<long> Calls { get; }

    public Counter<long> CallNodeChanges { get; }

    public Counter<long> DomainMessages { get; }

    public Counter<long> Orphans { get; }

    public Counter<long> SessionCheckpoints { get; }

    public Counter<long> SessionCheckpointParts { get; }

    public Counter<long> ServiceCheckpoints { get; }

    public Counter<long> DivergedSessions { get; }

    public Counter<long> RepliesLoggedInFull { get; }

    public Histogram<double> ReplyReadDuration { get; }

    public Counter<long> SessionsRefused { get; }

    public Counter<long> SessionsExpired { get; }

    public Histogram<long> LogCommitBatch { get; }

    /// <summary>The gauges of a service's sessions: live, never used, reply bytes held in memory and their budget.</summary>
    /// <summary>
    /// A primary's replication (docs/replication.md): per replica (tag <c>replica</c>, its address), the bytes of durable
    /// log it does not hold yet and whether it answers; observed from the primary's shippers.
    /// </summary>
    public void ObserveReplication(Func<IEnumerable<(string Replica, long LagBytes, bool Reachable)>> replicas)
    {
        Meter.CreateObservableGauge("persistentservices.replication.lag", () => replicas().Select(r =>
            new Measurement<long>(r.LagBytes, new KeyValuePair<string, object?>("replica", r.Replica))), "By",
            "Bytes of the primary's durable log a replica does not hold yet (synchronous replication holds replies back until the required replicas do).");
        Meter.CreateObservableGauge("persistentservices.replication.reachable", () => replicas().Select(r =>
            new Measurement<int>(r.Reachable ? 1 : 0, new KeyValuePair<string, object?>("replica", r.Replica))), "{replica}",
            "1 while a replica answers the primary's shipments, 0 while it is out of reach or refuses them.");
    }

    /// <summary>
    /// A replica's hot follower (docs/replication.md, "Hot followers"): how far its replay of the copy is behind what the
    /// copy durably holds, in bytes not applied, answered requests not replayed, and time since it was last caught up.
    /// </summary>
    public void ObserveFollower(Func<(long LagBytes, long LagRequests, double LagSeconds)> lag)
    {
        Meter.CreateObservableGauge("persistentservices.replication.replay_lag.bytes", () => lag().LagBytes, "By",
            "Bytes of a replica's durable copy its hot follower has not applied yet.");
        Meter.CreateObservableGauge("persistentservices.replication.replay_lag.requests", () => lag().LagRequests, "{request}",
            "Answered requests of a replica's copy its hot follower has not replayed yet (what a promotion now would replay).");
        Meter.CreateObservableGauge("persistentservices.replication.replay_lag.time", () => lag().LagSeconds, "s",
            "How long a replica's hot follower has been behind its copy (0 when caught up).");
    }

    public void ObserveSessions(Sessions.SessionTable sessions)
    {
        Meter.CreateObservableGauge("persistentservices.sessions.live", () => sessions.Count, "{session}", "Live sessions.");
        Meter.CreateObservableGauge("persistentservices.sessions.never_used", () => sessions.NeverUsed, "{session}",
            "Live sessions that have not received a request yet (they expire after UnusedSessionRetention).");
        Meter.CreateObservableGauge("persistentservices.sessions.held_bytes", () => sessions.Memory.HeldBytes, "By",
            "Bytes of buffered replies sessions hold in memory (counted against SessionMemoryBudgetBytes).");
        Meter.CreateObservableGauge("persistentservices.sessions.log_held_bytes", () => sessions.Memory.LogHeldBytes, "By",
            "About how many bytes of log the buffered replies kept there (not in memory) take; the log retains them while their sessions live.");
        Meter.CreateObservableGauge("persistentservices.sessions.memory_budget", () => sessions.Memory.BudgetBytes, "By",
            "The session memory budget (SessionMemoryBudgetBytes, or its default from the memory the process may use).");
    }
}
