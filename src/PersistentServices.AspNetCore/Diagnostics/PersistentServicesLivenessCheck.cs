using Microsoft.Extensions.Diagnostics.HealthChecks;
using PersistentServices.Hosting;

namespace PersistentServices.Diagnostics;

/// <summary>
/// Liveness, for a probe that restarts the process: unhealthy only when nothing but a restart helps, that is when the log
/// faulted (a failed write, a full disk: the service answers 503 until it restarts and recovers from the durable log) or
/// recovery failed. Healthy while the log is scanned, while sessions replay, near a cap and while draining, when
/// <see cref="PersistentServicesHealthCheck"/> (readiness) may say otherwise. Tagged <c>live</c>.
/// </summary>
internal sealed class PersistentServicesLivenessCheck(ServiceAvailability availability) : IHealthCheck
{
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var data = new Dictionary<string, object> { ["stage"] = availability.Stage.ToString() };
        var result = availability.Stage == RecoveryStage.Failed
            ? HealthCheckResult.Unhealthy($"Recovery failed; the service stops: {availability.Failure?.Message}", data: data)
            : availability.LogFault is { } fault
                ? HealthCheckResult.Unhealthy("The log faulted; the service must restart.", fault, data)
                : HealthCheckResult.Healthy("The log is usable.", data);
        return Task.FromResult(result);
    }
}
