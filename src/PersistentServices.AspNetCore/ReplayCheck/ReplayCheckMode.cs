using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Recovery;

namespace PersistentServices.Testing;

/// <summary>
/// Turns <c>AddPersistentServices</c> into the replay check when, and only when, it is asked for explicitly: by
/// <see cref="ReplayCheck.RunAsync"/> in the same call (in process), or by the environment variable
/// <see cref="ReplayCheckSandbox.EnvironmentVariable"/> naming a sandbox that psctl made. The check then recovers the
/// sandbox's copy of the log, binds no port and serves nothing, reports, and stops.
/// </summary>
internal static class ReplayCheckMode
{
    private static readonly AsyncLocal<ReplayCheckSandbox?> InProcess = new();

    /// <summary>While the returned value is not disposed, a host built on this flow runs the check on <paramref name="sandbox"/>.</summary>
    public static IDisposable EnterInProcess(ReplayCheckSandbox sandbox)
    {
        InProcess.Value = sandbox;
        return new Exit();
    }

    /// <summary>Registers the check when it was asked for; otherwise does nothing.</summary>
    /// <exception cref="InvalidOperationException">The environment variable names a directory that is not a sandbox.</exception>
    public static void AddIfRequested(IServiceCollection services)
    {
        var sandbox = InProcess.Value;
        var inProcess = sandbox is not null;
        if (sandbox is null && Environment.GetEnvironmentVariable(ReplayCheckSandbox.EnvironmentVariable) is { Length: > 0 } path)
        {
            sandbox = ReplayCheckSandbox.Open(path);
        }

        if (sandbox is null)
        {
            return;
        }

        services.AddSingleton(sp => new ReplayCheckRun(sandbox, inProcess, sp.GetRequiredService<IHostApplicationLifetime>(), sp.GetRequiredService<ILogger<ReplayCheckRun>>()));
        services.PostConfigure<PersistentServicesOptions>(options => options.LogDirectory = sandbox.LogDirectory);
        services.AddSingleton<IServer, ReplayCheckServer>();
        services.AddHostedService<ReplayCheckHostedService>();
    }

    private sealed class Exit : IDisposable
    {
        public void Dispose() => InProcess.Value = null;
    }
}
