using System.Collections.Concurrent;
using Microsoft.Extensions.Logging;

namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>Keeps every log entry of a server in memory (event id, level, message), for tests that check what was logged.</summary>
internal sealed class ListLoggerProvider : ILoggerProvider
{
    private readonly ConcurrentQueue<(int EventId, LogLevel Level, string Message)> _entries = new();

    public IReadOnlyCollection<(int EventId, LogLevel Level, string Message)> Entries => _entries;

    /// <summary>The messages logged with <paramref name="eventId"/>.</summary>
    public List<string> Messages(int eventId) => [.. _entries.Where(e => e.EventId == eventId).Select(e => e.Message)];

    public ILogger CreateLogger(string categoryName) => new ListLogger(_entries);

    public void Dispose()
    {
    }

    private sealed class ListLogger(ConcurrentQueue<(int, LogLevel, string)> entries) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state)
            where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Information;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
            => entries.Enqueue((eventId.Id, logLevel, formatter(state, exception)));
    }
}

/// <summary>The system clock moved by a settable offset (a host whose clock is ahead or behind); timers are the system's.</summary>
internal sealed class ShiftedTimeProvider(TimeSpan offset) : TimeProvider
{
    public TimeSpan Offset { get; set; } = offset;

    public override DateTimeOffset GetUtcNow() => System.GetUtcNow() + Offset;
}
