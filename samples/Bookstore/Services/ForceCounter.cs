using System.Collections.Concurrent;
using System.Collections.Immutable;
using System.Diagnostics.Metrics;

namespace Bookstore.Services;

/// <summary>
/// Counts this process's log forces and physical commits from the library's meter (<c>PersistentServices</c>):
/// <c>persistentservices.log.forces</c> by reason (reply, call, every-message: what a request asked for, as
/// [Phoenix/App Table 8] counts) and <c>persistentservices.log.commits</c> (what reached the disk; concurrent forces
/// share one). Served by the plain endpoint <c>GET /diagnostics/forces</c>.
/// </summary>
internal sealed class ForceCounter : IDisposable
{
    private const string MeterName = "PersistentServices";
    private const string Forces = "persistentservices.log.forces";
    private const string Commits = "persistentservices.log.commits";

    private readonly MeterListener _listener = new();
    private readonly ConcurrentDictionary<string, long> _forces = new(StringComparer.Ordinal);
    private long _commits;

    public ForceCounter()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == MeterName && instrument.Name is Forces or Commits)
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>(OnMeasurement);
        _listener.Start();
    }

    public ForceCounts Snapshot(string service)
    {
        var forces = _forces.ToImmutableSortedDictionary(StringComparer.Ordinal);
        return new ForceCounts(service, forces, forces.Values.Sum(), Interlocked.Read(ref _commits));
    }

    public void Dispose() => _listener.Dispose();

    private void OnMeasurement(Instrument instrument, long value, ReadOnlySpan<KeyValuePair<string, object?>> tags, object? state)
    {
        if (instrument.Name == Commits)
        {
            Interlocked.Add(ref _commits, value);
            return;
        }

        var reason = "unknown";
        foreach (var tag in tags)
        {
            if (tag.Key == "reason" && tag.Value is string text)
            {
                reason = text;
            }
        }

        _forces.AddOrUpdate(reason, value, (_, total) => total + value);
    }
}
