using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using PersistentServices.Recovery;

namespace PersistentServices.Testing;

/// <summary>
/// The replay check, in process, for a test project that references the service: replays every session of a copy of a
/// service's log through the application the test builds, the way recovery after a crash would with this build, and
/// reports per session whether it replayed fine or the first request whose reply or state differs
/// (docs/operations.md, "Replay check before an upgrade"). <c>psctl replay-check</c> runs the same check against a
/// built service in a child process.
/// </summary>
/// <example>
/// <code>
/// [Fact]
/// public async Task ProductionLog_ReplaysOnThisBuild()
/// {
///     var report = await ReplayCheck.RunAsync("testdata/orders-log", () => OrdersApp.Build([]));
///     Assert.True(report.Passed, report.ToString());
/// }
/// </code>
/// </example>
public static class ReplayCheck
{
    private static readonly SemaphoreSlim OneAtATime = new(1, 1);

    /// <summary>
    /// Copies the log in <paramref name="logDirectory"/> into a temporary sandbox, builds the application with
    /// <paramref name="buildHost"/> (what Program.cs does before <c>app.Run()</c>: <c>AddPersistentServices</c>, endpoints,
    /// <c>UsePersistentServices</c>; return the host without running it), recovers the copy with it without binding a port
    /// (sessions one at a time, in log order; each divergence only ends its own session's replay), stops it, deletes the
    /// sandbox and returns the report. <paramref name="logDirectory"/> is only read; the log directory the application
    /// configures is never opened.
    /// </summary>
    /// <remarks>
    /// One check runs at a time in a process; it may run beside another PersistentServices host there (each service reaches
    /// its own shared variables). Static state of the application is whatever the test process holds.
    /// </remarks>
    /// <param name="logDirectory">A copy of a service's log directory (docs/operations.md: how to take one from a running service).</param>
    /// <param name="buildHost">Builds the application under check; called once, on the caller's flow.</param>
    /// <param name="cancellationToken">Stops the check (the host is stopped and the sandbox deleted).</param>
    /// <returns>The report; <see cref="ReplayCheckReport.Passed"/> when every session replayed fine.</returns>
    /// <exception cref="InvalidOperationException">The copy could not be opened (damaged, or not a log), or the host does not use PersistentServices.</exception>
    /// <exception cref="IOException">The log could not be copied.</exception>
    public static async Task<ReplayCheckReport> RunAsync(string logDirectory, Func<IHost> buildHost, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrEmpty(logDirectory);
        ArgumentNullException.ThrowIfNull(buildHost);

        await OneAtATime.WaitAsync(cancellationToken).ConfigureAwait(false);
        var sandbox = ReplayCheckSandbox.Create(logDirectory, showSessionIds: false);
        try
        {
            IHost host;
            using (ReplayCheckMode.EnterInProcess(sandbox))
            {
                host = buildHost();
            }

            try
            {
                var run = host.Services.GetService<ReplayCheckRun>()
                          ?? throw new InvalidOperationException("The host does not call AddPersistentServices(), or was built before ReplayCheck.RunAsync called buildHost: there is nothing to check.");
                try
                {
                    await host.StartAsync(cancellationToken).ConfigureAwait(false);
                }
                catch (Exception ex) when (ex is not OperationCanceledException)
                {
                    throw new InvalidOperationException($"The replay check could not recover the copy of '{Path.GetFullPath(logDirectory)}': {ex.Message}", ex);
                }

                try
                {
                    return await run.Report.WaitAsync(cancellationToken).ConfigureAwait(false);
                }
                finally
                {
                    await host.StopAsync(CancellationToken.None).ConfigureAwait(false);
                }
            }
            finally
            {
                if (host is IAsyncDisposable asyncDisposable)
                {
                    await asyncDisposable.DisposeAsync().ConfigureAwait(false);
                }
                else
                {
                    host.Dispose();
                }
            }
        }
        finally
        {
            sandbox.Delete();
            OneAtATime.Release();
        }
    }
}
