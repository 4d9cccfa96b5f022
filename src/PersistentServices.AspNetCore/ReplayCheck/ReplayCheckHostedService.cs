using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;

namespace PersistentServices.Testing;

/// <summary>
/// Registered before the recovery host: says loudly that this process is a replay check, and when the host stops
/// without a report (the copy could not be opened), reports that.
/// </summary>
internal sealed partial class ReplayCheckHostedService(ReplayCheckRun run, PersistentRuntime runtime, ILogger<ReplayCheckHostedService> logger) : IHostedService
{
    public Task StartAsync(CancellationToken cancellationToken)
    {
        CheckMode(logger, run.Sandbox.Source, run.Sandbox.LogDirectory);
        return Task.CompletedTask;
    }

    public Task StopAsync(CancellationToken cancellationToken)
    {
        run.Abandon(runtime);
        return Task.CompletedTask;
    }

    [LoggerMessage(1220, LogLevel.Warning,
        "Replay check mode: recovering a copy of the log of {Source} in {Sandbox}; no port is bound, nothing is served, and the service stops after the check")]
    private static partial void CheckMode(ILogger logger, string source, string sandbox);
}
