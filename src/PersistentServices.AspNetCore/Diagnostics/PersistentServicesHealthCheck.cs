using Microsoft.Extensions.Diagnostics.HealthChecks;
using PersistentServices.Hosting;

namespace PersistentServices.Diagnostics;

/// <summary>
/// Ready once the log is open and the analysis scan is done (new sessions are accepted while old ones replay);
/// degraded while replication holds acknowledgements back or the required replicas lag (<see cref="Replication.ReplicationHealth"/>),
/// while some sessions are quarantined after a divergent replay, and near a cap: live sessions at
/// <see cref="NearCapFraction"/> of <see cref="PersistentServicesOptions.MaxSessions"/> (starts are about to get 429), or
/// buffered replies at that fraction of the session memory budget (replies are about to go to the log); unhealthy while
/// scanning, while draining, when recovery failed, when the log faulted (the service must restart), and on a replica (it
/// serves nothing; its reason then says whether its hot follower lags). Tagged
/// <c>ready</c>; <see cref="PersistentServicesLivenessCheck"/> (tagged <c>live</c>) is the one for a liveness probe.
/// </summary>
internal sealed class PersistentServicesHealthCheck(PersistentRuntime runtime, ServiceAvailability availability, Replication.ReplicationHealth replication) : IHealthCheck
{
    /// <summary>How close to a cap health turns degraded.</summary>
    public const double NearCapFraction = 0.9;

    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var sessions = runtime.Sessions;
        var live = sessions.Count;
        var maxSessions = runtime.Options.MaxSessions;
        var held = sessions.Memory.HeldBytes;
        var budget = sessions.Memory.BudgetBytes;
        var data = new Dictionary<string, object>
        {
            ["stage"] = availability.Stage.ToString(),
            ["sessions"] = live,
            ["maxSessions"] = maxSessions,
            ["neverUsedSessions"] = sessions.NeverUsed,
            ["heldReplyBytes"] = held,
            ["memoryBudgetBytes"] = budget,
            ["replyLogBytes"] = sessions.Memory.LogHeldBytes,
            ["replayingSessions"] = sessions.Enumerate().Count(s => !s.Ready.IsCompleted),
            ["quarantinedSessions"] = runtime.QuarantinedSessions,
        };
        var degraded = replication.Degraded();
        if (degraded is not null)
        {
            data["replication"] = degraded;
        }

        var nearMaxSessions = live >= NearCapFraction * maxSessions;
        var nearBudget = held >= NearCapFraction * budget;
        var result = availability.Stage switch
        {
            // The failure was logged once, with its details; every probe repeating its stack trace would bury that message.
            RecoveryStage.Failed => HealthCheckResult.Unhealthy($"Recovery failed; the service stops: {availability.Failure?.Message}", data: data),
            _ when availability.LogFault is { } fault => HealthCheckResult.Unhealthy("The log faulted; the service must restart.", fault, data),
            RecoveryStage.Draining => HealthCheckResult.Unhealthy("Stopping: running requests finish, new ones get 503.", data: data),
            RecoveryStage.Replica => HealthCheckResult.Unhealthy(
                "A replica: it keeps a copy of the primary's log and serves nothing until promoted (docs/replication.md)." + (degraded is null ? "" : $" Degraded: {degraded}."), data: data),
            _ when degraded is not null => HealthCheckResult.Degraded($"Replication: {degraded}.", data: data),
            _ when runtime.QuarantinedSessions > 0 => HealthCheckResult.Degraded(
                $"{runtime.QuarantinedSessions} sessions diverged on replay and are quarantined; every other session serves (docs/upgrades.md).", data: data),
            _ when nearMaxSessions => HealthCheckResult.Degraded(
                $"{live} live sessions of at most {maxSessions} ({sessions.NeverUsed} never used): new sessions are about to get 429 (docs/capacity.md).", data: data),
            _ when nearBudget => HealthCheckResult.Degraded(
                $"Buffered replies hold {held} of the {budget}-byte session memory budget: new replies are about to be kept in the log (duplicates read them from disk; docs/capacity.md).", data: data),
            RecoveryStage.Replaying => HealthCheckResult.Healthy("Accepting requests; recovered sessions are replaying.", data),
            RecoveryStage.Ready => HealthCheckResult.Healthy("Recovered.", data),
            _ => HealthCheckResult.Unhealthy("Opening the log and scanning it.", data: data),
        };
        return Task.FromResult(result);
    }
}
