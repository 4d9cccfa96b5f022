using System.Collections.Concurrent;
using Microsoft.Extensions.Logging;

namespace PersistentServices.Tests.TestSupport;

/// <summary>An <see cref="ILogger"/> that keeps what was logged, for assertions.</summary>
internal sealed class CapturingLogger : ILogger
{
    public ConcurrentQueue<(LogLevel Level, EventId Id, string Message)> Entries { get; } = new();

    public IEnumerable<(LogLevel Level, EventId Id, string Message)> At(LogLevel level) => Entries.Where(e => e.Level == level);

    public IDisposable? BeginScope<TState>(TState state)
        where TState : notnull => null;

    public bool IsEnabled(LogLevel logLevel) => true;

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        => Entries.Enqueue((logLevel, eventId, formatter(state, exception)));
}
