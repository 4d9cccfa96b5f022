using System.Collections.Concurrent;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>
/// WebApplicationFactory stops a host's services after it disposed them (found with the endpoint benchmark template):
/// the drain then found the log closed and logged "A service checkpoint failed" at error level on every test's cleanup.
/// A stop after disposal finds nothing to drain.
/// </summary>
public sealed class StopAfterDisposeTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task StopAfterTheRuntimeWasDisposed_DrainsNothing_LogsNoError()
    {
        var errors = new ConcurrentQueue<string>();
        var server = await TestServer.StartAsync(_dir.Path, build: b => b.Logging.AddProvider(new ErrorCollector(errors)));
        var checkpoints = server.App.Services.GetRequiredService<CheckpointHostedService>();
        var runtime = server.Runtime;
        await server.DisposeAsync();
        Assert.True(runtime.IsDisposed);

        await checkpoints.StopAsync(TestContext.Current.CancellationToken);
        await runtime.DisposeAsync(); // twice: nothing happens

        Assert.Empty(errors);
    }

    private sealed class ErrorCollector(ConcurrentQueue<string> errors) : ILoggerProvider
    {
        public ILogger CreateLogger(string categoryName) => new Logger(errors, categoryName);

        public void Dispose()
        {
        }

        private sealed class Logger(ConcurrentQueue<string> errors, string category) : ILogger
        {
            public IDisposable? BeginScope<TState>(TState state)
                where TState : notnull => null;

            public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Error;

            public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
            {
                if (logLevel >= LogLevel.Error)
                {
                    errors.Enqueue($"{category}: {formatter(state, exception)}");
                }
            }
        }
    }
}
