using Microsoft.Extensions.Diagnostics.HealthChecks;
using PersistentServices.Hosting;

namespace PersistentServices.Diagnostics;

/// <summary>
/// Liveness, for a probe that restarts the process: unhealthy only when nothing but a restart helps, that is when the log
/// faulted (a failed write, a full disk: the service answers 503 until it restarts and recovers from the durable log) or
/// recovery failed. Healthy while a fenced primary demotes itself to a replica (docs/replication.md, "Demotion"), while the log is scanned, while sessions replay, near a cap and while draining, when
/// <see cref="PersistentServicesHealthCheck"/> (readiness) may say otherwise. Healthy too on a replica whose hot follower
/// lags (<see cref="Replication.ReplicationHealth"/>): restarting it would only throw its replay away; its description and
/// data then say why it is degraded. Tagged <c>live</c>.
/// </summary>
internal sealed class PersistentServicesLivenessCheck(ServiceAvailability availability, Replication.ReplicationHealth replication) : IHealthCheck
{
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var data = new Dictionary<string, object> { ["stage"] = availability.Stage.ToString() };
        var result = availability.IsRejoining
            ? HealthCheckResult.Healthy("Fenced by a newer term: this node demotes itself and rejoins its group as a replica (no restart needed).", data)
            : availability.Stage == RecoveryStage.Failed
                ? HealthCheckResult.Unhealthy($"Recovery failed; the service stops: {availability.Failure?.Message}", data: data)
                : availability.LogFault is { } fault
                    ? HealthCheckResult.Unhealthy("The log faulted; the service must restart.", fault, data)
                    : replication.Degraded() is { } degraded
                        ? HealthCheckResult.Healthy($"The log is usable. Degraded: {degraded}.", Degrade(data, degraded))
                        : HealthCheckResult.Healthy("The log is usable.", data);
        return Task.FromResult(result);
    }

    private static Dictionary<string, object> Degrade(Dictionary<string, object> data, string reason)
    {
        data["replication"] = reason;
        data["degraded"] = true;
        return data;
    }
}
