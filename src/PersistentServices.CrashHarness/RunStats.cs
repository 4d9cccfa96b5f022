using System.Collections.Concurrent;
using System.Diagnostics;

namespace PersistentServices.CrashHarness;

/// <summary>What the clients count while they run.</summary>
internal enum Counter
{
    /// <summary>HTTP requests sent by the client sessions (session starts, adds, state reads).</summary>
    RequestsSent,

    /// <summary>Add operations answered 200 and consistent with the model.</summary>
    Acknowledged,

    /// <summary>Replies marked <c>PS-Replayed: true</c> (the buffered reply of an earlier execution).</summary>
    Replayed,

    /// <summary>Retries after a request timed out.</summary>
    RetryTimeout,

    /// <summary>Retries after the connection was refused (the service was down).</summary>
    RetryRefused,

    /// <summary>Retries after the connection was reset or closed mid-request (the service was killed).</summary>
    RetryReset,

    /// <summary>Retries after 503 (recovering or log unavailable).</summary>
    RetryUnavailable,

    /// <summary>Retries after 429 (too many sessions).</summary>
    RetryTooMany,

    /// <summary>Sessions started (201).</summary>
    SessionsStarted,
}

/// <summary>Thread-safe counters and the list of violations.</summary>
internal sealed class RunStats
{
    private readonly long[] _counters = new long[Enum.GetValues<Counter>().Length];
    private readonly ConcurrentQueue<string> _violations = new();
    private readonly ConcurrentQueue<(int Start, double Ms)> _firstAckMs = new();
    private readonly Lock _startLock = new();
    private long _startedAt;
    private int _start;
    private int _violationSeen;

    public long this[Counter counter] => Interlocked.Read(ref _counters[(int)counter]);

    /// <summary>Everything that broke the contract, in the order it was seen.</summary>
    public IReadOnlyCollection<string> Violations => _violations;

    /// <summary>For each service start that acknowledged anything: milliseconds from the start to its first acknowledgement.</summary>
    public IReadOnlyCollection<(int Start, double Ms)> FirstAckMs => _firstAckMs;

    public void Add(Counter counter) => Interlocked.Increment(ref _counters[(int)counter]);

    /// <summary>Marks a service start (Stopwatch timestamp), to measure the time until it acknowledges an operation.</summary>
    public void ServiceStarting(int start)
    {
        lock (_startLock)
        {
            _start = start;
            _startedAt = Stopwatch.GetTimestamp();
        }
    }

    /// <summary>
    /// For each acknowledged operation: milliseconds from its first send to its acknowledgement, retries across kills and
    /// restarts included (what a client waited).
    /// </summary>
    public IReadOnlyCollection<double> AckWaitMs => _ackWaitMs;

    private readonly ConcurrentQueue<double> _ackWaitMs = new();

    /// <summary>
    /// Counts an acknowledged operation that took <paramref name="waitMs"/> from its first send; the first one after a
    /// service start ends that start's measurement.
    /// </summary>
    public void Acknowledged(double waitMs)
    {
        Add(Counter.Acknowledged);
        _ackWaitMs.Enqueue(waitMs);
        if (Volatile.Read(ref _startedAt) == 0)
        {
            return;
        }

        lock (_startLock)
        {
            if (_startedAt != 0)
            {
                _firstAckMs.Enqueue((_start, Stopwatch.GetElapsedTime(_startedAt).TotalMilliseconds));
                _startedAt = 0;
            }
        }
    }

    /// <summary>Called once, with the first violation, e.g. to keep the service's output of that moment.</summary>
    public Action? OnFirstViolation { get; set; }

    public void Violation(string description)
    {
        _violations.Enqueue(description);
        if (Interlocked.Exchange(ref _violationSeen, 1) == 0)
        {
            OnFirstViolation?.Invoke();
        }
    }
}
