using System.Collections.Concurrent;
using System.Diagnostics.Tracing;

namespace PersistentServices.EndToEnd;

/// <summary>
/// PS_BENCH_ALLOC_TICKS=1 in serve mode: the runtime's allocation ticks (one event per ~100 KB allocated, naming the type
/// of the object that crossed the mark), summed by type and printed when the server stops. A statistical picture of what
/// the request path allocates, without a profiler.
/// </summary>
internal sealed class AllocationSampler : EventListener
{
    private readonly ConcurrentDictionary<string, long> _bytes = new();
    private long _events;

    protected override void OnEventSourceCreated(EventSource source)
    {
        if (source.Name == "Microsoft-Windows-DotNETRuntime")
        {
            EnableEvents(source, EventLevel.Verbose, (EventKeywords)0x1); // GC keyword: GCAllocationTick
        }
    }

    protected override void OnEventWritten(EventWrittenEventArgs e)
    {
        if (e.EventName?.StartsWith("GCAllocationTick", StringComparison.Ordinal) != true || e.Payload is null)
        {
            return;
        }

        var type = e.PayloadNames!.IndexOf("TypeName") is var t and >= 0 ? e.Payload[t] as string ?? "?" : "?";
        var amount = e.PayloadNames.IndexOf("AllocationAmount64") is var a and >= 0 ? Convert.ToInt64(e.Payload[a]) : 100_000;
        _bytes.AddOrUpdate(type, amount, (_, v) => v + amount);
        Interlocked.Increment(ref _events);
    }

    public void Print(TextWriter writer, int top = 40)
    {
        var total = _bytes.Values.Sum();
        writer.WriteLine($"allocation ticks: {_events}, {total / 1e6:F1} MB sampled");
        foreach (var (type, bytes) in _bytes.OrderByDescending(p => p.Value).Take(top))
        {
            writer.WriteLine($"{100.0 * bytes / total,6:F2} %  {type}");
        }
    }
}
