using Microsoft.Extensions.Diagnostics.HealthChecks;
using PersistentServices.Hosting;

namespace PersistentServices.Diagnostics;

/// <summary>
/// Ready once the log is open and the analysis scan is done (new sessions are accepted while old ones replay);
/// degraded while some sessions are quarantined after a divergent replay; unhealthy while scanning, while draining, when
/// recovery failed, or when the log faulted (the service must restart). Tagged
/// <c>ready</c> and <c>live</c>.
/// </summary>
internal sealed class PersistentServicesHealthCheck(PersistentRuntime runtime) : IHealthCheck
{
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var data = new Dictionary<string, object>
        {
            ["stage"] = runtime.Stage.ToString(),
            ["sessions"] = runtime.Sessions.Count,
            ["replayingSessions"] = runtime.Sessions.All.Count(s => !s.Ready.IsCompleted),
            ["quarantinedSessions"] = runtime.QuarantinedSessions,
        };
        var result = runtime.Stage switch
        {
            // The failure was logged once, with its details; every probe repeating its stack trace would bury that message.
            RecoveryStage.Failed => HealthCheckResult.Unhealthy($"Recovery failed; the service stops: {runtime.Failure?.Message}", data: data),
            _ when runtime.LogFault is { } fault => HealthCheckResult.Unhealthy("The log faulted; the service must restart.", fault, data),
            RecoveryStage.Draining => HealthCheckResult.Unhealthy("Stopping: running requests finish, new ones get 503.", data: data),
            _ when runtime.QuarantinedSessions > 0 => HealthCheckResult.Degraded(
                $"{runtime.QuarantinedSessions} sessions diverged on replay and are quarantined; every other session serves (docs/upgrades.md).", data: data),
            RecoveryStage.Replaying => HealthCheckResult.Healthy("Accepting requests; recovered sessions are replaying.", data),
            RecoveryStage.Ready => HealthCheckResult.Healthy("Recovered.", data),
            _ => HealthCheckResult.Unhealthy("Opening the log and scanning it.", data: data),
        };
        return Task.FromResult(result);
    }
}
