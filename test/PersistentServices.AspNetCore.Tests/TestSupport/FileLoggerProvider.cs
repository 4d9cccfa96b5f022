using Microsoft.Extensions.Logging;

namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>Appends log lines to a file (PS_TEST_LOG_FILE), for debugging the in-process servers.</summary>
internal sealed class FileLoggerProvider(string path) : ILoggerProvider
{
    private static readonly Lock Gate = new();

    public ILogger CreateLogger(string categoryName) => new FileLogger(path, categoryName);

    public void Dispose()
    {
    }

    private sealed class FileLogger(string path, string category) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state)
            where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Debug;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        {
            lock (Gate)
            {
                File.AppendAllText(path, $"{DateTime.UtcNow:HH:mm:ss.fff} {logLevel} {category}: {formatter(state, exception)} {exception}\n");
            }
        }
    }
}
