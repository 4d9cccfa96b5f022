using System.Diagnostics.Metrics;

namespace PersistentServices.Diagnostics;

/// <summary>
/// The library's one meter, <c>PersistentServices</c>. Instruments are named <c>persistentservices.&lt;area&gt;.&lt;thing&gt;</c>;
/// durations are in seconds.
/// </summary>
internal static class PersistentServicesMetrics
{
    public const string MeterName = "PersistentServices";

    public static readonly Meter Meter = new(MeterName, typeof(PersistentServicesMetrics).Assembly.GetName().Version?.ToString());

    public static readonly Counter<long> LogAppends = Meter.CreateCounter<long>(
        "persistentservices.log.appends", "{record}", "Records appended to the log.");

    public static readonly Counter<long> LogAppendedBytes = Meter.CreateCounter<long>(
        "persistentservices.log.appended_bytes", "By", "Record bytes appended to the log (envelope included).");

    public static readonly Counter<long> LogCommits = Meter.CreateCounter<long>(
        "persistentservices.log.commits", "{commit}", "Durable commits (log forces).");

    public static readonly Histogram<double> LogCommitDuration = Meter.CreateHistogram<double>(
        "persistentservices.log.commit.duration", "s", "Time from issuing a commit to it being durable.");

    public static readonly Histogram<double> RecoveryReplayDuration = Meter.CreateHistogram<double>(
        "persistentservices.recovery.replay.duration", "s", "Time to replay every recovered session after a crash.");

    public static readonly Counter<long> Requests = Meter.CreateCounter<long>(
        "persistentservices.requests", "{request}", "Persistent requests by outcome (executed, duplicate, refused).");

    public static readonly Counter<long> Forces = Meter.CreateCounter<long>(
        "persistentservices.log.forces", "{force}", "Times a request waited for the log to be durable, by reason (reply, call, every-message); commits are shared, see log.commits.");

    public static readonly Counter<long> Calls = Meter.CreateCounter<long>(
        "persistentservices.calls", "{call}", "Calls persistent requests made to other services, by callee role and how they were answered (sent, from-log).");

    public static readonly Counter<long> DomainMessages = Meter.CreateCounter<long>(
        "persistentservices.domain.messages", "{message}", "Domain messages sent to members, by kind (flush, recovered).");

    public static readonly Counter<long> Orphans = Meter.CreateCounter<long>(
        "persistentservices.domain.orphans", "{session}", "Sessions found to be orphans and rolled back, and replies held back because they were.");

    public static readonly Counter<long> SessionCheckpoints = Meter.CreateCounter<long>(
        "persistentservices.checkpoints.sessions", "{checkpoint}", "Session checkpoints taken.");

    public static readonly Counter<long> ServiceCheckpoints = Meter.CreateCounter<long>(
        "persistentservices.checkpoints.service", "{checkpoint}", "Service (fuzzy) checkpoints taken; each may truncate the log.");

    public static readonly Counter<long> DivergedSessions = Meter.CreateCounter<long>(
        "persistentservices.recovery.diverged_sessions", "{session}", "Sessions whose replay diverged and that were quarantined.");

    public static readonly Histogram<long> LogCommitBatch = Meter.CreateHistogram<long>(
        "persistentservices.log.commit.waiters", "{waiter}", "Waiters released by one commit (group commit).");
}
