using System.Diagnostics.Metrics;

namespace PersistentServices.EndToEnd;

/// <summary>
/// PS_BENCH_COMMIT_STATS=1 in serve mode: the log's group commits while the server ran (count, mean time from issuing a
/// commit to its being durable, mean waiters released per commit), from the library's own meter, printed when it stops.
/// </summary>
internal sealed class CommitStats : IDisposable
{
    private readonly MeterListener _listener = new();
    private long _commits;
    private long _durationCount;
    private double _durationSum;
    private long _waiterCount;
    private long _waiterSum;

    public CommitStats()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == "PersistentServices" && instrument.Name.StartsWith("persistentservices.log.commit", StringComparison.Ordinal))
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((instrument, value, _, _) =>
        {
            if (instrument.Name == "persistentservices.log.commits")
            {
                Interlocked.Add(ref _commits, value);
            }
            else if (instrument.Name == "persistentservices.log.commit.waiters")
            {
                Interlocked.Increment(ref _waiterCount);
                Interlocked.Add(ref _waiterSum, value);
            }
        });
        _listener.SetMeasurementEventCallback<double>((instrument, value, _, _) =>
        {
            if (instrument.Name == "persistentservices.log.commit.duration")
            {
                lock (_listener)
                {
                    _durationCount++;
                    _durationSum += value;
                }
            }
        });
        _listener.Start();
    }

    public void Print(TextWriter writer)
    {
        lock (_listener)
        {
            writer.WriteLine($"commits: {_commits:N0}; issue to durable: mean {(_durationCount == 0 ? 0 : _durationSum / _durationCount * 1e6):F0} µs; waiters per commit: mean {(_waiterCount == 0 ? 0 : (double)_waiterSum / _waiterCount):F2}");
        }
    }

    public void Dispose() => _listener.Dispose();
}
